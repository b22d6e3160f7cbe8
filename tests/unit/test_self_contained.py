"""The repository explains itself: nothing in it cites requirement numbers kept outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A parenthesised K1, or R1-R5 with E3: a citation a newcomer cannot look up in the repository.
CITATION = re.compile(
    r"\((?:[A-Z][0-9]{1,2}(?:-[A-Z][0-9]{1,2})?)(?:, [A-Z][0-9]{1,2}(?:-[A-Z][0-9]{1,2})?)*\)"
)
#: A tracker's issue, by number: the tracker is not in the repository either.
ISSUE = re.compile(r"\bissues? [0-9]+", re.IGNORECASE)
PLACES = ("src", "tests", "docs", "examples", "README.md")
SUFFIXES = {".py", ".md", ".sql", ".html", ".sh"}


def test_no_file_cites_requirement_numbers_kept_elsewhere() -> None:
    """No source, test, doc or example cites a requirement number, an issue number or a design
    document kept elsewhere."""
    found = []
    for place in PLACES:
        root = ROOT / place
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.suffix not in SUFFIXES or "_griffe" in path.parts:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if CITATION.search(line) or ISSUE.search(line) or "DESIGN" + ".md" in line:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []

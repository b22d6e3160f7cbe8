"""docs/cli.md is the parser's own help: regenerated, it comes out the same."""

from __future__ import annotations

from pathlib import Path

from tenure.ops.cli.reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_cli_reference_matches_the_parser() -> None:
    """Every command and option the parser has is in docs/cli.md, and nothing else: a change to
    the CLI without `python -m tenure.ops.cli.reference > docs/cli.md` fails here."""
    assert DOC.read_text() == render(), (
        "docs/cli.md is stale: run `python -m tenure.ops.cli.reference > docs/cli.md`"
    )

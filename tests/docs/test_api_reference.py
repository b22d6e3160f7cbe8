"""The API reference (mkdocs.yml, docs/api/) builds with warnings as errors and covers the package.

Each `::: tenure.module.Name` line of a docs/api page renders that object from its docstrings;
a broken link, a docstring griffe cannot read or a name it cannot find fails `--strict`.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tenure

ROOT = Path(__file__).resolve().parents[2]
API_PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def directives(page: Path) -> list[str]:
    return DIRECTIVE.findall(page.read_text(encoding="utf-8"))


def built_page(site: Path, page: Path) -> Path:
    """Where mkdocs writes a docs/api page: api/index.html, or api/NAME/index.html."""
    return site / "api" / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")


def resolve(path: str) -> Any:
    """The object a directive names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            found = getattr(found, name)
        return found
    raise LookupError(path)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_the_reference_builds_strictly(site: Path) -> None:
    """`mkdocs build --strict` exits 0: no broken link or anchor, no docstring warning."""
    assert (site / "index.html").is_file()
    assert (site / "api" / "index.html").is_file()


@pytest.mark.parametrize("page", API_PAGES, ids=lambda p: p.name)
def test_each_api_page_renders_every_object_it_names(site: Path, page: Path) -> None:
    """Every `:::` directive of a docs/api page becomes a heading with that object's id in the built
    page, so a reference that renders empty fails."""
    html = built_page(site, page).read_text(encoding="utf-8")
    missing = [path for path in directives(page) if f'id="{path}"' not in html]
    assert missing == [], f"{page.name} renders no entry for {missing}"


def test_members_render_with_their_docstrings(site: Path) -> None:
    """The classes' members are rendered too: `JobContext.atomic`, `Client.enqueue`, `Tenure.task`,
    with text of their docstrings."""
    context = (site / "api" / "context" / "index.html").read_text(encoding="utf-8")
    clients = (site / "api" / "clients" / "index.html").read_text(encoding="utf-8")
    app = (site / "api" / "app" / "index.html").read_text(encoding="utf-8")
    assert 'id="tenure.handler.context.JobContext.atomic"' in context and "fenced completion" in context
    assert (
        'id="tenure.producer.client.Client.enqueue"' in clients
        and 'id="tenure.producer.sync_client.SyncClient"' in clients
    )
    assert 'id="tenure.app.Tenure.task"' in app and "Registers a handler" in app


def test_every_public_name_has_a_reference_entry() -> None:
    """Each name in `tenure.__all__` is the object of some docs/api directive, so a new public name
    without a reference entry fails here."""
    documented = [resolve(path) for page in API_PAGES for path in directives(page)]
    missing = [name for name in tenure.__all__ if not any(getattr(tenure, name) is d for d in documented)]
    assert missing == [], f"add a `::: tenure.module.Name` line to a docs/api page for {missing}"

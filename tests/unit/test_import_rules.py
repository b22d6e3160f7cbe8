"""The import rules no contract tool checks: a `_private` module or name is private to the package
that holds it, and the library outside the lab never imports the lab."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[str, str]]:
    """(module, name) for each absolute `from tenure... import name` and `import tenure...` in a file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("tenure"):
            for alias in node.names:
                yield node.module or "", alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tenure"):
                    yield alias.name, ""


def _owner(module: str, name: str) -> str | None:
    """The package a private module or name belongs to, or None when both are public."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    if name.startswith("_") and not name.startswith("__"):
        is_module_file = (SRC / module.replace(".", "/")).with_suffix(".py").exists()
        return module.rsplit(".", 1)[0] if is_module_file else module
    return None


def test_no_module_imports_a_private_name_of_another_package() -> None:
    """A module imports a `_private` module or name only from inside the package that holds it."""
    breaches = []
    for path in sorted(SRC.rglob("*.py")):
        importer = _module_name(path)
        for module, name in _imports(path):
            owner = _owner(module, name)
            if owner is not None and importer != owner and not importer.startswith(owner + "."):
                breaches.append(f"{importer} imports {module}:{name or '*'} (private to {owner})")
    assert breaches == []


def test_the_library_never_imports_the_lab() -> None:
    """Only the lab itself and the commands that run it (`tenure bench`, `tenure soak`) import the lab."""
    importers = set()
    for path in sorted(SRC.rglob("*.py")):
        importer = _module_name(path)
        if importer.startswith("tenure.lab"):
            continue
        if any(module.startswith("tenure.lab") for module, _ in _imports(path)):
            importers.add(importer)
    assert importers <= {"tenure.ops.cli.bench", "tenure.ops.cli.soak"}, importers

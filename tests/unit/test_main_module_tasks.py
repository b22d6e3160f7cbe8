"""A task registered by a script run as __main__ is named `__main__.f`, which no worker has: the
registration warns, naming the fix; imported as a module, or named explicitly, it does not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import tenure

app = tenure.Tenure("postgresql://unused")


@app.task(queue="files")
def count_rows(ctx: tenure.JobContext, path: str) -> int:
    return 1


@app.task(name="shop.total", queue="files")
def total(ctx: tenure.JobContext, counts: list[int]) -> int:
    return sum(counts)
"""


def _python(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "shop.py").write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    return subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True
    )


def test_a_task_registered_under_main_warns_with_what_to_do(tmp_path: Path) -> None:
    """Run as a script: one warning, for the unnamed task, saying its jobs would stay pending and
    how to fix it; the explicitly named task is not warned about."""
    said = _python(tmp_path, "shop.py").stderr
    assert "MainModuleTask: task '__main__.count_rows' is registered by a script run as __main__" in said
    assert "would stay pending: define the tasks in a module" in said
    assert said.count("MainModuleTask") == 1


def test_the_same_tasks_imported_as_a_module_do_not_warn(tmp_path: Path) -> None:
    """Imported by its name, as `tenure worker shop` imports it, the module warns of nothing."""
    assert "MainModuleTask" not in _python(tmp_path, "-W", "error", "-c", "import shop").stderr

"""docs/workflows.md's first example runs as a reader saves it: `shop.py` holds the tasks,
`nightly.py` enqueues the workflow, and the steps are stored under the module's task names, which
`tenure worker shop` serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
from test_readme_examples import blocks

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "workflows.md"


def test_the_first_workflow_example_runs_as_saved_and_names_its_tasks_by_module(
    dsn: str, tmp_path: Path
) -> None:
    """Each of the guide's first two python blocks is a file (its first line names it); run with
    python, the script exits 0, prints the workflow and the total step's job, and the stored
    steps are shop's tasks, never __main__'s."""
    first_two = [b for b in blocks(GUIDE) if b.language == "python"][:2]
    names = [b.text.splitlines()[0].removeprefix("# ").split(":")[0] for b in first_two]
    assert names == ["shop.py", "nightly.py"]
    for name, block in zip(names, first_two, strict=True):
        (tmp_path / name).write_text(block.text, encoding="utf-8")
    env = {**os.environ, "TENURE_DSN": dsn, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    done = subprocess.run(
        [sys.executable, "nightly.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    workflow_id, total_job = (int(word) for word in done.stdout.split())
    with psycopg.connect(dsn) as conn:
        steps = conn.execute(
            "SELECT task, job_id FROM tenure.workflow_steps WHERE workflow_id = %s ORDER BY job_id",
            (workflow_id,),
        ).fetchall()
    assert {task for task, _ in steps} == {"shop.count_rows", "shop.total", "shop.report"}
    assert ("shop.total", total_job) in steps

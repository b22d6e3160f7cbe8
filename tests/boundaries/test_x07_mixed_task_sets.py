"""X7, across versions: two real worker processes with different task sets on one queue (a
mixed-version deploy). Each claims only the tasks it has registered, so neither spends an attempt
of the other's jobs on UNKNOWN_TASK; every job runs once, in a process that knows its task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import rows, wait_until

from tenure import JobSpec
from tenure.db.queries import Queries

JOBS_PER_SET = 30


@pytest.mark.crash
@pytest.mark.slow
async def test_x07_workers_of_different_task_sets_leave_each_others_jobs_alone(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path
) -> None:
    """alpha knows a.work, beta knows b.work, both serve queue 'shared'; every job has one attempt. All
    60 jobs succeed on their first attempt, each in a process of the app that has its task, with no
    UNKNOWN_TASK in the audit log."""
    payload = {"marker_dir": str(marker_dir)}
    specs = [JobSpec(task=t, queue="shared", payload=payload, max_attempts=1) for t in ("a.work", "b.work")]
    enqueued = await queries.job_insert_many(db, [s for s in specs for _ in range(JOBS_PER_SET)])
    extra = ("--queues", "shared", "--concurrency", "4")
    alpha = spawn_worker("alpha-1", lease=30, extra=extra, app="apps.task_sets:alpha")
    beta = spawn_worker("beta-1", lease=30, extra=extra, app="apps.task_sets:beta")

    async def settled() -> bool:
        [row] = await rows(db, "SELECT count(*) AS n FROM tenure.jobs WHERE state IN ('pending', 'running')")
        return row["n"] == 0

    await wait_until(settled, timeout=60, what="every job to finish")
    found = await rows(
        db, "SELECT id, task, state::text AS state, attempt_count FROM tenure.jobs ORDER BY id"
    )
    assert {(r["task"], r["state"], r["attempt_count"]) for r in found} == {
        ("a.work", "succeeded", 1),
        ("b.work", "succeeded", 1),
    }
    assert len(found) == len(enqueued) == 2 * JOBS_PER_SET
    pids = {"alpha": alpha.pid, "beta": beta.pid}
    for r in found:
        ran = json.loads((marker_dir / f"ran-{r['id']}").read_text())
        assert ran["pid"] == pids["alpha" if r["task"] == "a.work" else "beta"], (r, ran)
    assert await rows(db, "SELECT * FROM tenure.job_events WHERE error_code = 'UNKNOWN_TASK'") == []
    for proc in (alpha, beta):
        stats = proc.stop()
        assert stats["succeeded"] == JOBS_PER_SET and stats["dead"] == 0, stats

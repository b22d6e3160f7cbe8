"""Per-key ordering across a real crash: the head's worker process is SIGKILLed mid-job; the
follower stays blocked until the head is recovered, rerun under a new token and finished."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

BOUNDARIES = Path(__file__).resolve().parents[1] / "boundaries"
if str(BOUNDARIES) not in sys.path:
    sys.path.insert(0, str(BOUNDARIES))

from _harness import (  # noqa: E402
    WorkerProcess,
    job_row,
    marker,
    spawn_worker_process,
    wait_for_marker,
    wait_until,
)

from tenure.db.queries import Queries  # noqa: E402
from tenure.model.jobs import JobSpec  # noqa: E402

LEASE = 1.0


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Any]:
    procs: list[WorkerProcess] = []

    def spawn(name: str) -> WorkerProcess:
        proc = spawn_worker_process(dsn, tmp_path, name, lease=LEASE)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.cleanup()


@pytest.mark.crash
@pytest.mark.slow
async def test_a_crashed_head_runs_again_before_its_follower(
    db: psycopg.AsyncConnection[Any], queries: Queries, workers: Any, tmp_path: Path
) -> None:
    """Head killed under token 1: the follower never starts until the head's token-2 run finished."""
    head_dir, follower_dir = tmp_path / "head", tmp_path / "follower"
    head_dir.mkdir()
    follower_dir.mkdir()
    (follower_dir / "release-1").write_text("run straight through")
    worker_a = workers("worker-a")
    head, follower = await queries.job_insert_many(
        db,
        [
            JobSpec(
                task="boundary.block_first_attempt", payload={"marker_dir": str(d)}, ordering_key="acct-1"
            )
            for d in (head_dir, follower_dir)
        ],
    )
    await wait_for_marker(head_dir, "started-1", timeout=30, procs=(worker_a,))
    assert marker(follower_dir, "started-1") is None  # worker A has a free slot, but not for it
    worker_a.crash()
    worker_b = workers("worker-b")

    async def follower_done() -> dict[str, Any] | None:
        row = await job_row(db, follower.id)
        return row if row["state"] == "succeeded" else None

    await wait_until(follower_done, timeout=30, what="the follower to run after the recovered head")
    head_row = await job_row(db, head.id)
    assert (head_row["state"], head_row["lease_token"]) == ("succeeded", 2)
    head_finished, follower_started = marker(head_dir, "finished-2"), marker(follower_dir, "started-1")
    assert head_finished is not None and follower_started is not None
    assert follower_started["at"] >= head_finished["at"]
    assert marker(head_dir, "finished-1") is None
    worker_b.stop()

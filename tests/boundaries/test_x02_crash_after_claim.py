"""X2: a worker process dies after its claim committed and before the work: the lease expires,
recovery gives the job back, another worker reclaims it under a new token and completes it.

Run with both kinds of handler: a plain function (in a worker thread) and a coroutine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import job_events, job_row, marker, wait_for_marker, wait_until

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

LEASE = 1.0
#: The same task as a plain function and as a coroutine (tests/apps/boundary_app.py).
HANDLERS = {"thread": "boundary.block_first_attempt", "async": "boundary.block_first_attempt_async"}


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("handler", list(HANDLERS))
async def test_x02_sigkilled_worker_lease_expires_and_job_is_reclaimed(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path, handler: str
) -> None:
    """A job whose worker is SIGKILLed after the claim is recovered (token 1) and done under token 2."""
    worker_a = spawn_worker("worker-a", lease=LEASE)
    [job] = await queries.job_insert_many(
        db, [JobSpec(task=HANDLERS[handler], payload={"marker_dir": str(marker_dir)})]
    )
    started = await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker_a,))
    assert started["pid"] == worker_a.pid
    claimed = await job_row(db, job.id)
    assert (claimed["state"], claimed["lease_owner"], claimed["lease_token"]) == ("running", "worker-a", 1)

    worker_a.crash()
    worker_b = spawn_worker("worker-b", lease=LEASE)

    async def done() -> dict[str, Any] | None:
        row = await job_row(db, job.id)
        return row if row["state"] == "succeeded" else None

    final = await wait_until(done, timeout=20, what="the job to be reclaimed and completed")
    assert final["lease_token"] == 2 and final["attempt_count"] == 2
    assert final["lease_owner"] is None and final["finished_at"] is not None
    assert final["last_error_code"] is None, "a succeeded job shows no error; its history keeps it"

    second = marker(marker_dir, "started-2")
    assert second is not None and second["pid"] == worker_b.pid
    assert marker(marker_dir, "finished-1") is None, "the killed attempt must never have finished"
    assert marker(marker_dir, "finished-2") is not None

    events = await job_events(db, job.id)
    assert [
        (e["event"], e["from_state"], e["to_state"], e["token"], e["worker"], e["error_code"]) for e in events
    ] == [("lease_expired", "running", "scheduled", 1, "worker-a", "LEASE_EXPIRED")]  # for its backoff
    stats = worker_b.stop()
    assert stats["succeeded"] == 1 and stats["fencing_losses"] == 0

"""X17: hand-off across a crash and a freeze, on real worker processes. A job handed to a worker
that is then killed is a job claimed by a worker that died: its lease runs out, recovery gives it
back, another worker runs it. A job handed to a frozen worker (SIGSTOP) that resumes before the
lease runs out waits in that worker's notification and runs there, under its first token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import job_events, job_row, marker, rows, wait_for_marker, wait_until

from tenure import Client

TASK = "boundary.block_first_attempt"
#: An offer stands two polls: a slow poll keeps it standing while the test acts.
SLOW_POLL = ("--poll-interval", "2")


async def offer_standing(db: psycopg.AsyncConnection[Any], worker: str) -> None:
    async def stands() -> bool:
        found = await rows(
            db,
            "SELECT 1 FROM tenure.worker_offers WHERE worker = %s AND slots > 0 AND until > now()",
            (worker,),
        )
        return bool(found)

    await wait_until(stands, timeout=20, what=f"{worker}'s offer")


async def succeeded(db: psycopg.AsyncConnection[Any], job_id: int, what: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        row = await job_row(db, job_id)
        return row if row["state"] == "succeeded" else None

    row: dict[str, Any] = await wait_until(done, timeout=30, what=what)
    return row


@pytest.mark.crash
@pytest.mark.slow
async def test_x17_a_job_handed_to_a_killed_worker_runs_elsewhere_after_its_lease(
    db: psycopg.AsyncConnection[Any], dsn: str, spawn_worker: Any, marker_dir: Path
) -> None:
    """Handed to worker-a as it is frozen and then killed, the job is running under worker-a's
    lease (token 1) and never started; once the lease runs out, worker-b runs it under token 2."""
    worker_a = spawn_worker("worker-a", lease=1.0, extra=SLOW_POLL)
    await offer_standing(db, "worker-a")
    worker_a.pause()
    async with Client(dsn) as client:
        job = await client.enqueue(TASK, {"marker_dir": str(marker_dir)}, queue="default")
    assert job.handed
    handed = await job_row(db, job.id)
    assert (handed["state"], handed["lease_owner"], handed["lease_token"]) == ("running", "worker-a", 1)
    worker_a.crash()
    worker_b = spawn_worker("worker-b", lease=1.0)

    final = await succeeded(db, job.id, "the handed job to be recovered and run")
    assert (final["lease_token"], final["attempt_count"]) == (2, 2)
    assert marker(marker_dir, "started-1") is None, "the killed worker never started it"
    second = marker(marker_dir, "started-2")
    assert second is not None and second["pid"] == worker_b.pid
    events = await job_events(db, job.id)
    assert [(e["event"], e["token"], e["worker"], e["error_code"]) for e in events] == [
        ("lease_expired", 1, "worker-a", "LEASE_EXPIRED")
    ]
    assert worker_b.stop()["fencing_losses"] == 0


@pytest.mark.crash
@pytest.mark.slow
async def test_x17_a_frozen_worker_that_resumes_runs_the_job_handed_to_it(
    db: psycopg.AsyncConnection[Any], dsn: str, spawn_worker: Any, marker_dir: Path
) -> None:
    """Handed to worker-a while it is frozen, the job waits in worker-a's notification; resumed
    within the lease, worker-a runs it under token 1, and it succeeds on its first attempt."""
    worker_a = spawn_worker("worker-a", lease=10.0, extra=SLOW_POLL)
    await offer_standing(db, "worker-a")
    worker_a.pause()
    async with Client(dsn) as client:
        job = await client.enqueue(TASK, {"marker_dir": str(marker_dir)}, queue="default")
    assert job.handed
    worker_a.resume()
    started = await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker_a,))
    assert started["pid"] == worker_a.pid
    (marker_dir / "release-1").write_text("")

    final = await succeeded(db, job.id, "the handed job to finish")
    assert (final["lease_token"], final["attempt_count"]) == (1, 1)
    stats = worker_a.stop()
    assert (stats["handed"], stats["succeeded"], stats["fencing_losses"]) == (1, 1, 0)

"""X3: worker A is paused past its lease, B reclaims and completes; when A resumes, its late
completion is refused by the fence: zero rows, a fencing_lost event under A's token, and B's
result stands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import at, db_now, job_events, job_row, rows, wait_for_marker, wait_until

from tenure.db.queries import Queries
from tenure.jobs import JobSpec

LEASE = 1.0


@pytest.mark.crash
@pytest.mark.slow
async def test_x03_paused_worker_late_completion_updates_zero_rows(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path
) -> None:
    """SIGSTOP A past its lease, B reclaims and completes, SIGCONT A: A's fenced completion is refused."""
    await db.execute("CREATE TABLE public.boundary_results (job_id bigint, token bigint, pid integer)")
    worker_a = spawn_worker("worker-a", lease=LEASE)
    [job] = await queries.job_insert_many(
        db, [JobSpec(task="boundary.record_result", payload={"marker_dir": str(marker_dir)})]
    )
    # A is inside its completion transaction (result row written, fence not yet checked).
    await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker_a,))
    worker_a.pause()

    worker_b = spawn_worker("worker-b", lease=LEASE)

    async def done_by_b() -> dict[str, Any] | None:
        row = await job_row(db, job.id)
        return row if row["state"] == "succeeded" else None

    await wait_until(done_by_b, timeout=20, what="B to reclaim and complete the job")
    await wait_for_marker(marker_dir, "finished-2", timeout=5)
    before = await job_row(db, job.id)
    assert before["lease_token"] == 2

    # A wakes up believing it still holds token 1 and goes straight into its fenced completion.
    (marker_dir / "release-1").touch()
    worker_a.resume()

    async def fencing_lost() -> list[dict[str, Any]]:
        return [e for e in await job_events(db, job.id) if e["event"] == "fencing_lost"]

    [lost] = await wait_until(fencing_lost, timeout=15, what="A's refused completion to be recorded")
    assert (lost["token"], lost["worker"], lost["error_code"]) == (1, "worker-a", "FENCED_ATOMIC")

    after = await job_row(db, job.id)
    assert after == before, "A's late completion must not change the job B completed"
    results = await rows(db, "SELECT job_id, token, pid FROM public.boundary_results ORDER BY token")
    assert results == [{"job_id": job.id, "token": 2, "pid": worker_b.pid}], "A's result must roll back"
    assert (marker_dir / "finished-1").exists() is False

    stats_a = worker_a.stop()
    assert stats_a["succeeded"] == 0 and stats_a["fencing_losses"] >= 1
    stats_b = worker_b.stop()
    assert stats_b["succeeded"] == 1 and stats_b["fencing_losses"] == 0
    history = [(e["event"], e["token"], e["worker"]) for e in await job_events(db, job.id)]
    # A's side shows too: the refused write, and, when A's watchdog saw the lost lease first,
    # the moment A stopped the job (lease_lost).
    assert history[0] == ("lease_expired", 1, "worker-a")
    assert ("fencing_lost", 1, "worker-a") in history[1:]
    assert set(history[1:]) <= {("fencing_lost", 1, "worker-a"), ("lease_lost", 1, "worker-a")}


async def test_x03_stale_token_writes_update_zero_rows(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Injected clock: after B reclaims, A's complete, fail and heartbeat under token 1 change nothing."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t")])
    t0 = await db_now(db)
    claim = {"queue": "default", "limit": 1, "default_lease_seconds": 10, "default_runtime_seconds": 600}
    [a] = await queries.job_claim(db, owner="A", now=t0, **claim)
    recovered = await queries.lease_recover_expired(
        db, limit=10, backoff_base=0, backoff_cap=0, jitter=0, now=at(t0, 11)
    )
    assert [(r.job_id, r.token) for r in recovered] == [(job.id, 1)]
    [b] = await queries.job_claim(db, owner="B", now=at(t0, 12), **claim)
    assert (a.lease.token, b.lease.token) == (1, 2)
    assert await queries.job_complete_many(db, owner="B", leases=[(job.id, 2)], now=at(t0, 13)) == {
        (job.id, 2): "done"
    }
    settled = await job_row(db, job.id)

    # A wakes up at t0+14 and completes; then, even at a clock reading inside A's old lease
    # (t0+5), its token no longer matches: the fence is the token, not only the time.
    assert await queries.job_complete_many(db, owner="A", leases=[(job.id, 1)], now=at(t0, 14)) == {
        (job.id, 1): "lost"
    }
    late = await queries.job_fail(
        db, job_id=job.id, owner="A", token=1, error_code="X", error="late", retry_delay=1, now=at(t0, 5)
    )
    assert late.outcome == "lost"
    assert (
        await queries.lease_extend_many(db, owner="A", renewals=[(job.id, 1, {"p": 1}, 10)], now=at(t0, 5))
        == []
    )
    assert await job_row(db, job.id) == settled
    lost = [(e["event"], e["token"], e["worker"], e["error_code"]) for e in await job_events(db, job.id)]
    assert lost[-2:] == [("fencing_lost", 1, "A", "FENCED_COMPLETE"), ("fencing_lost", 1, "A", "FENCED_FAIL")]

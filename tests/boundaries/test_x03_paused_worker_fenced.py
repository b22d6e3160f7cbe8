"""X3: worker A is paused past its lease, B reclaims and completes; when A resumes, its late
completion is refused by the fence: zero rows, a fencing_lost event under A's token, and B's
result stands.

A plain-function handler cannot be interrupted, so it resumes straight into its completion and
the fence refuses it. A coroutine is normally cancelled by its worker's watchdog as soon as A
resumes, which rolls its transaction back before it commits (should its completion get out
first, the fence refuses it); one shielded from that cancellation reaches the database and, like
the thread, is refused by the fence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import at, db_now, job_events, job_row, rows, wait_for_marker, wait_until

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

LEASE = 1.0
#: Handlers that resume into their completion: a plain function, and a coroutine shielded from
#: its watchdog's cancellation (tests/apps/boundary_app.py).
FENCED_HANDLERS = {"thread": "boundary.record_result", "async_shielded": "boundary.record_result_shielded"}
RESULTS_TABLE = "CREATE TABLE public.boundary_results (job_id bigint, token bigint, pid integer)"


async def pause_a_until_b_completes(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path, task: str
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """A claims `task` and stalls inside its completion transaction; A is SIGSTOPped and B
    reclaims and completes the job; A is then released and SIGCONTed. Returns A, B, the job
    and its row as B left it."""
    await db.execute(RESULTS_TABLE)
    worker_a = spawn_worker("worker-a", lease=LEASE)
    [job] = await queries.job_insert_many(db, [JobSpec(task=task, payload={"marker_dir": str(marker_dir)})])
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

    # A wakes up believing it still holds token 1, in the middle of its completion.
    (marker_dir / "release-1").touch()
    worker_a.resume()
    return worker_a, worker_b, job, before


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("handler", list(FENCED_HANDLERS))
async def test_x03_paused_worker_late_completion_updates_zero_rows(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path, handler: str
) -> None:
    """SIGSTOP A past its lease, B reclaims and completes, SIGCONT A: A's fenced completion is refused."""
    worker_a, worker_b, job, before = await pause_a_until_b_completes(
        db, queries, spawn_worker, marker_dir, FENCED_HANDLERS[handler]
    )

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


@pytest.mark.crash
@pytest.mark.slow
async def test_x03_paused_async_handler_is_cancelled_before_its_late_commit(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path
) -> None:
    """SIGSTOP A (a coroutine mid-completion) past its lease, B completes, SIGCONT A: nothing of A's lands."""
    worker_a, worker_b, job, before = await pause_a_until_b_completes(
        db, queries, spawn_worker, marker_dir, "boundary.record_result_async"
    )

    async def a_stopped() -> list[dict[str, Any]]:
        return [e for e in await job_events(db, job.id) if e["event"] in ("lease_lost", "fencing_lost")]

    # Whichever stops A first, its watchdog (lease_lost) or the fence (fencing_lost), says so.
    await wait_until(a_stopped, timeout=15, what="A to record that it stopped the job")
    stats_a = worker_a.stop()
    assert stats_a["succeeded"] == 0 and stats_a["leases_lost"] + stats_a["fencing_losses"] >= 1

    after = await job_row(db, job.id)
    assert after == before, "A's late completion must not change the job B completed"
    results = await rows(db, "SELECT job_id, token, pid FROM public.boundary_results ORDER BY token")
    assert results == [{"job_id": job.id, "token": 2, "pid": worker_b.pid}], "A's result must roll back"
    assert (marker_dir / "finished-1").exists() is False
    stats_b = worker_b.stop()
    assert stats_b["succeeded"] == 1 and stats_b["fencing_losses"] == 0
    history = [(e["event"], e["token"], e["worker"]) for e in await job_events(db, job.id)]
    assert history[0] == ("lease_expired", 1, "worker-a")
    assert set(history[1:]) <= {("fencing_lost", 1, "worker-a"), ("lease_lost", 1, "worker-a")}
    print(f"\nX3 async: A's side of the history after resuming: {[e for e, _, _ in history[1:]]}")


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

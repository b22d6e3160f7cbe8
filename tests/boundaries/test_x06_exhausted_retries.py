"""X6: a job that keeps failing ends in a visible terminal state (dead), never deleted, with
its last error on the row and one audit event per failed attempt, whether the attempts end in
handler failures or in expired leases."""

from __future__ import annotations

from typing import Any

import psycopg
from _harness import at, db_now, job_events, job_row, states, wait_until

import tenure
from tenure.db.ops_queries import OpsQueries
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

ATTEMPTS = 3
CLAIM = {"queue": "default", "limit": 1, "default_lease_seconds": 10, "default_runtime_seconds": 600}


async def assert_visible_dead(db: psycopg.AsyncConnection[Any], queries: Queries, job_id: int) -> None:
    """Dead is an operational state: the row, its error, its listing and its history all remain."""
    row = await job_row(db, job_id)
    assert row["state"] == "dead" and row["finished_at"] is not None
    assert row["attempt_count"] == ATTEMPTS == row["max_attempts"]
    assert row["lease_owner"] is None and row["lease_token"] == ATTEMPTS
    assert [d.id for d in await OpsQueries("tenure").dead_search(db)] == [job_id]
    assert await states(db) == {"dead": 1}
    assert await queries.job_claim(db, owner="late", **CLAIM) == []


async def test_x06_failed_attempts_end_dead_with_history(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Injected clock: 3 fenced failures give 2 'retry' events, then 'dead'; the row keeps the last error."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t", max_attempts=ATTEMPTS)])
    t = await db_now(db)
    for attempt in range(1, ATTEMPTS + 1):
        [claimed] = await queries.job_claim(db, owner="w", now=t, **CLAIM)
        assert claimed.attempt == attempt
        outcome = await queries.job_fail(
            db,
            job_id=job.id,
            owner="w",
            token=claimed.lease.token,
            error_code=f"E{attempt}",
            error=f"boom {attempt}",
            retry_delay=30,
            now=at(t, 1),
        )
        assert outcome.outcome == "failed" and outcome.state is not None
        assert outcome.state.value == ("dead" if attempt == ATTEMPTS else "scheduled")
        if attempt < ATTEMPTS:
            # Not claimable before its backoff has passed; promoted once it has.
            assert await queries.job_claim(db, owner="w", now=at(t, 2), **CLAIM) == []
            assert (await queries.job_promote_due(db, limit=10, now=at(t, 31))).promoted == 1
        t = at(t, 31)

    await assert_visible_dead(db, queries, job.id)
    row = await job_row(db, job.id)
    assert (row["last_error_code"], row["last_error"]) == (f"E{ATTEMPTS}", f"boom {ATTEMPTS}")
    events = [(e["event"], e["to_state"], e["token"], e["error_code"]) for e in await job_events(db, job.id)]
    assert events == [
        ("retry", "scheduled", 1, "E1"),
        ("retry", "scheduled", 2, "E2"),
        ("dead", "dead", 3, "E3"),
    ]


async def test_x06_expired_leases_end_dead_with_lease_expired(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Injected clock: a lease expiring on every attempt goes twice back to the queue (scheduled for the
    recovery's backoff), then dead (LEASE_EXPIRED)."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t", max_attempts=ATTEMPTS)])
    t = await db_now(db)
    recover = {"limit": 10, "backoff_base": 5, "backoff_cap": 60, "jitter": 0}
    for attempt in range(1, ATTEMPTS + 1):
        [claimed] = await queries.job_claim(db, owner=f"w{attempt}", now=t, **CLAIM)
        assert claimed.attempt == attempt
        assert await queries.lease_recover_expired(db, now=at(t, 9.9), **recover) == []  # still valid
        [recovered] = await queries.lease_recover_expired(db, now=at(t, 11), **recover)
        assert recovered.state.value == ("dead" if attempt == ATTEMPTS else "scheduled")
        t = at(t, 11 + 5 * 2 ** (attempt - 1))  # the recovery's own backoff
        await queries.job_promote_due(db, limit=10, now=t)

    await assert_visible_dead(db, queries, job.id)
    row = await job_row(db, job.id)
    assert row["last_error_code"] == "LEASE_EXPIRED" and "w3" in row["last_error"]
    events = [
        (e["event"], e["to_state"], e["token"], e["worker"], e["error_code"])
        for e in await job_events(db, job.id)
    ]
    assert events == [
        ("lease_expired", "scheduled", 1, "w1", "LEASE_EXPIRED"),
        ("lease_expired", "scheduled", 2, "w2", "LEASE_EXPIRED"),
        ("lease_expired", "dead", 3, "w3", "LEASE_EXPIRED"),
    ]


async def test_x06_worker_exhausts_retries_to_dead(
    db: psycopg.AsyncConnection[Any], queries: Queries, app: tenure.Tenure, start_worker: Any
) -> None:
    """A worker retries an always-failing job with backoff, then leaves it dead with its error and history."""
    calls: list[int] = []

    @app.task(name="x6.flaky", max_attempts=ATTEMPTS, backoff=tenure.Backoff(base=0.05, cap=0.05, jitter=0.0))
    async def flaky(ctx: tenure.JobContext) -> None:
        calls.append(ctx.attempt)
        raise tenure.Transient(f"downstream unavailable (attempt {ctx.attempt})", code="DOWNSTREAM")

    worker = await start_worker(app, lease_seconds=5, poll_interval=0.05)
    job = await app.enqueue("x6.flaky")

    async def dead() -> bool:
        return (await job_row(db, job.id))["state"] == "dead"

    await wait_until(dead, timeout=15, what="the job to exhaust its retries")
    assert calls == [1, 2, 3]
    await assert_visible_dead(db, queries, job.id)
    row = await job_row(db, job.id)
    assert row["last_error_code"] == "DOWNSTREAM"
    assert "downstream unavailable (attempt 3)" in row["last_error"]
    events = [(e["event"], e["token"], e["error_code"]) for e in await job_events(db, job.id)]
    assert events == [("retry", 1, "DOWNSTREAM"), ("retry", 2, "DOWNSTREAM"), ("dead", 3, "DOWNSTREAM")]
    assert (worker.stats.retried, worker.stats.dead, worker.stats.succeeded) == (2, 1, 0)

"""X7: one job is locked (a transaction elsewhere holds its row, or its worker is stuck);
unrelated jobs still flow past it: claims and recovery skip it instead of waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from _harness import at, db_now, job_row, states, wait_until

import tenure
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

CLAIM = {"queue": "default", "default_lease_seconds": 10, "default_runtime_seconds": 600}
#: A claim that had to wait for the lock would hang; this turns the hang into a failure.
NO_WAIT = 5.0


async def lock_row(dsn: str, job_id: int) -> psycopg.AsyncConnection[Any]:
    """Opens a transaction that holds job `job_id`'s row lock until the connection is closed."""
    holder = await psycopg.AsyncConnection.connect(dsn)
    await holder.execute("SELECT id FROM tenure.jobs WHERE id = %s FOR UPDATE", (job_id,))
    return holder


async def test_x07_claims_and_recovery_skip_a_locked_row(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """The queue's head is row-locked elsewhere: a claim returns every other job at once; recovery too."""
    jobs = await queries.job_insert_many(db, [JobSpec(task="t", priority=9)] + [JobSpec(task="t")] * 5)
    head, others = jobs[0], [j.id for j in jobs[1:]]
    holder = await lock_row(dsn, head.id)
    try:
        t0 = await db_now(db)
        claimed = await asyncio.wait_for(queries.job_claim(db, owner="w", limit=10, now=t0, **CLAIM), NO_WAIT)
        assert [c.id for c in claimed] == others, "the locked head must be skipped, not waited for"
        assert (await job_row(db, head.id))["state"] == "pending"

        # Recovery past every lease's expiry skips an expired running row that is locked too.
        wedged, rest = others[0], others[1:]
        await holder.execute("SELECT id FROM tenure.jobs WHERE id = %s FOR UPDATE", (wedged,))
        recovered = await asyncio.wait_for(
            queries.lease_recover_expired(
                db, limit=100, backoff_base=0, backoff_cap=0, jitter=0, now=at(t0, 11)
            ),
            NO_WAIT,
        )
        assert sorted(r.job_id for r in recovered) == rest
        assert (await job_row(db, wedged))["state"] == "running"
    finally:
        await holder.rollback()
        await holder.close()
    # Once released, the head is claimable again (first, by priority) with the recovered rest.
    late = await queries.job_claim(db, owner="w", limit=10, now=at(t0, 12), **CLAIM)
    assert [c.id for c in late] == [head.id, *rest]


@pytest.mark.slow
async def test_x07_worker_drains_jobs_past_a_locked_one(
    dsn: str, db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """A worker completes 20 jobs while the top-priority one is row-locked, then that one once released."""
    done: list[int] = []

    @app.task(name="x7.quick")
    async def quick(ctx: tenure.JobContext, n: int) -> None:
        done.append(n)

    locked = await app.enqueue("x7.quick", {"n": -1}, priority=9)
    holder = await lock_row(dsn, locked.id)
    try:
        for n in range(20):
            await app.enqueue("x7.quick", {"n": n})
        await start_worker(app, lease_seconds=5, concurrency=4, poll_interval=0.1)

        async def others_done() -> bool:
            return (await states(db)).get("succeeded", 0) == 20

        await wait_until(others_done, timeout=20, what="the 20 unlocked jobs to complete")
        assert sorted(done) == list(range(20))
        assert (await job_row(db, locked.id))["state"] == "pending"
    finally:
        await holder.rollback()
        await holder.close()

    async def all_done() -> bool:
        return await states(db) == {"succeeded": 21}

    await wait_until(all_done, timeout=10, what="the released job to complete")
    assert done[-1] == -1


@pytest.mark.slow
async def test_x07_stuck_running_job_does_not_block_others(
    dsn: str, db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """A job whose handler hangs with its row locked mid-write holds one slot; other jobs still complete."""
    stuck_started = asyncio.Event()
    release = asyncio.Event()
    done: list[int] = []

    @app.task(name="x7.stuck")
    async def stuck(ctx: tenure.JobContext) -> None:
        stuck_started.set()
        await release.wait()

    @app.task(name="x7.quick")
    async def quick(ctx: tenure.JobContext, n: int) -> None:
        done.append(n)

    stuck_job = await app.enqueue("x7.stuck", priority=9)
    await start_worker(app, lease_seconds=30, concurrency=2, poll_interval=0.1)
    await asyncio.wait_for(stuck_started.wait(), 10)
    # The stuck worker is also wedged in a write: its job row stays locked by an open transaction.
    holder = await lock_row(dsn, stuck_job.id)
    try:
        for n in range(15):
            await app.enqueue("x7.quick", {"n": n})

        async def others_done() -> bool:
            return (await states(db)).get("succeeded", 0) == 15

        await wait_until(others_done, timeout=20, what="the 15 other jobs to complete")
        assert sorted(done) == list(range(15))
        row = await job_row(db, stuck_job.id)
        assert row["state"] == "running" and row["lease_token"] == 1
    finally:
        await holder.rollback()
        await holder.close()
        release.set()


LIMITED = {**CLAIM, "queue": "limited", "limited": True}


async def test_x07_limited_claim_skips_a_locked_row(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """A limited queue's head is row-locked elsewhere: the claim takes the next at once, in its limit."""
    await db.execute(
        "INSERT INTO tenure.queue_limits (queue, max_running, declared_by) VALUES ('limited', 5, 'test')"
    )
    jobs = await queries.job_insert_many(
        db, [JobSpec(task="t", queue="limited", priority=9)] + [JobSpec(task="t", queue="limited")] * 8
    )
    head, others = jobs[0], [j.id for j in jobs[1:]]
    holder = await lock_row(dsn, head.id)
    try:
        t0 = await db_now(db)
        claimed = await asyncio.wait_for(
            queries.job_claim(db, owner="w", limit=10, now=t0, **LIMITED), NO_WAIT
        )
        assert [c.id for c in claimed] == others[:5], "the locked head is skipped; the limit still holds"
        assert (await job_row(db, head.id))["state"] == "pending"
    finally:
        await holder.rollback()
        await holder.close()


async def test_x07_limited_claim_waits_for_no_other_claim(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Another session holds a limited queue's claim turn (a claimer paused mid-claim): this claim
    returns at once with nothing instead of queueing behind it, and claims once the turn is free."""
    await db.execute(
        "INSERT INTO tenure.queue_limits (queue, max_running, declared_by) VALUES ('limited', 5, 'test')"
    )
    await queries.job_insert_many(db, [JobSpec(task="t", queue="limited")] * 3)
    holder = await psycopg.AsyncConnection.connect(dsn)
    try:
        await holder.execute(
            queries._sql["limit_lock"], {"lock_space": "tenure.limit:tenure", "queue": "limited"}
        )
        claimed = await asyncio.wait_for(queries.job_claim(db, owner="w", limit=10, **LIMITED), NO_WAIT)
        assert claimed == []
    finally:
        await holder.rollback()
        await holder.close()
    assert len(await queries.job_claim(db, owner="w", limit=10, **LIMITED)) == 3


async def test_x07_a_locked_limits_row_costs_only_its_queue(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """The limited queue's limits row is locked elsewhere: its claim takes nothing without waiting."""
    await db.execute(
        "INSERT INTO tenure.queue_limits (queue, rate, per_seconds, tokens, refilled_at, declared_by)"
        " VALUES ('limited', 100, 1, 100, now(), 'test')"
    )
    await queries.job_insert_many(db, [JobSpec(task="t", queue="limited")] * 3)
    holder = await psycopg.AsyncConnection.connect(dsn)
    try:
        await holder.execute("SELECT * FROM tenure.queue_limits WHERE queue = 'limited' FOR UPDATE")
        claimed = await asyncio.wait_for(queries.job_claim(db, owner="w", limit=10, **LIMITED), NO_WAIT)
        assert claimed == []
    finally:
        await holder.rollback()
        await holder.close()
    assert len(await queries.job_claim(db, owner="w", limit=10, **LIMITED)) == 3


@pytest.mark.slow
async def test_x07_a_locked_row_in_a_limited_queue_stalls_no_queue(
    dsn: str, db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """The head of a queue limited to 5 is row-locked: every other job of that queue and of an
    unlimited queue completes, and the worker keeps running."""
    app.limit("limited", max_running=5)
    done: list[str] = []

    @app.task(name="x7.limited", queue="limited")
    async def limited_job(ctx: tenure.JobContext, n: int) -> None:
        done.append(f"limited-{n}")

    @app.task(name="x7.free", queue="free")
    async def free_job(ctx: tenure.JobContext, n: int) -> None:
        done.append(f"free-{n}")

    locked = await app.enqueue(limited_job, {"n": -1}, priority=9)
    holder = await lock_row(dsn, locked.id)
    try:
        for n in range(19):
            await app.enqueue(limited_job, {"n": n})
            await app.enqueue(free_job, {"n": n})
        worker = await start_worker(
            app, queues=["limited", "free"], lease_seconds=5, concurrency=8, poll_interval=0.1
        )

        async def others_done() -> bool:
            return (await states(db)).get("succeeded", 0) == 38

        await wait_until(others_done, timeout=30, what="the 38 unlocked jobs to complete")
        assert not worker.services.health.service("claimer").failing
        assert (await job_row(db, locked.id))["state"] == "pending"
    finally:
        await holder.rollback()
        await holder.close()


@pytest.mark.slow
async def test_x07_a_claim_that_fails_in_one_queue_costs_only_that_queue(
    dsn: str, db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """Every claim of queue 'broken' fails on the server: the jobs of queue 'free' all complete,
    and the claimer is not failing, so the worker does not give up."""
    await db.execute(
        """CREATE FUNCTION tenure.refuse_broken() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'queue broken is broken'; END $$"""
    )
    await db.execute(
        "CREATE TRIGGER refuse_broken BEFORE UPDATE ON tenure.jobs FOR EACH ROW"
        " WHEN (NEW.queue = 'broken' AND NEW.state = 'running') EXECUTE FUNCTION tenure.refuse_broken()"
    )
    done: list[int] = []

    @app.task(name="x7.broken", queue="broken")
    async def broken_job(ctx: tenure.JobContext) -> None:
        raise AssertionError("a job of the broken queue cannot be claimed")

    @app.task(name="x7.free2", queue="free")
    async def free_job(ctx: tenure.JobContext, n: int) -> None:
        done.append(n)

    for _ in range(3):
        await app.enqueue(broken_job)
    worker = await start_worker(
        app,
        queues=["broken", "free"],
        lease_seconds=5,
        concurrency=4,
        poll_interval=0.05,
        service_failure_limit=1.0,
    )
    for n in range(30):
        await app.enqueue(free_job, {"n": n})
        await asyncio.sleep(0.02)

    # The handler's return comes before its completion commits: wait for the committed states.
    async def free_done() -> bool:
        return (await states(db)) == {"succeeded": 30, "pending": 3}

    await wait_until(free_done, timeout=30, what="the 30 jobs of the free queue to succeed")
    assert sorted(done) == list(range(30))
    assert not worker.services.health.service("claimer").failing
    assert worker.stats.claim_errors > 0

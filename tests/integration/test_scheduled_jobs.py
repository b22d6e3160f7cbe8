"""Scheduled jobs through a real worker: a job enqueued for later and a retry waiting out its
backoff sit as `scheduled` (outside the claim indexes), are promoted when due, and start within a
fraction of a second of it, however long the worker's poll interval; cancelling one is allowed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from psycopg import AsyncConnection

import tenure
from tenure import JobContext, Tenure
from tenure.db.control_queries import ControlQueries
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec, JobState
from tenure.model.retry import Backoff

#: A poll interval no test waits for: a job that starts promptly was not found by polling.
SLOW_POLL = 30.0
#: How late after its due time a scheduled job may start (promotion resolution, notification,
#: claim, and a loaded 2-core machine).
PROMPT = 0.5


@contextlib.asynccontextmanager
async def running(app: Tenure, **options: Any) -> AsyncIterator[tenure.Worker]:
    worker = app.worker(poll_interval=SLOW_POLL, shutdown_grace=2.0, **options)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.started.wait(), 30)
    assert worker.listener is not None
    await asyncio.wait_for(worker.listener.connected.wait(), 30)
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await app.close()


async def state_of(db: AsyncConnection[Any], job_id: int) -> str:
    row = await (await db.execute("SELECT state::text FROM tenure.jobs WHERE id = %s", (job_id,))).fetchone()
    assert row is not None
    return str(row[0])


async def test_delayed_jobs_are_promoted_and_start_on_time(dsn: str, db: AsyncConnection[Any]) -> None:
    """Jobs delayed before and after the worker started wait as scheduled and start within PROMPT of
    their due time, never before it, with a 30 s poll interval; an undelayed one starts at once."""
    app = Tenure(dsn)
    started: dict[str, float] = {}

    @app.task(name="stamp")
    async def stamp(ctx: JobContext, name: str) -> None:
        started[name] = time.monotonic()

    t0 = time.monotonic()
    early = await app.enqueue(stamp, {"name": "early"}, delay=1.5)  # before the worker started
    assert await state_of(db, early.id) == "scheduled"
    async with running(app):
        t1 = time.monotonic()  # on a loaded machine a worker can take a while to start
        late = await app.enqueue(stamp, {"name": "late"}, delay=0.6)  # the promoter hears of it
        now = await app.enqueue(stamp, {"name": "now"})
        assert await state_of(db, late.id) == "scheduled"
        assert await state_of(db, now.id) != "scheduled"  # due at once (maybe already claimed)
        for _ in range(300):
            if len(started) == 3:
                break
            await asyncio.sleep(0.01)
    assert set(started) == {"early", "late", "now"}, started
    assert 1.5 <= started["early"] - t0 <= max(1.5, t1 - t0) + PROMPT, (started["early"] - t0, t1 - t0)
    assert 0.6 <= started["late"] - t1 <= 0.6 + PROMPT, started["late"] - t1
    assert started["now"] - t1 <= PROMPT


async def test_a_retry_waits_as_scheduled_then_runs_when_due(dsn: str, db: AsyncConnection[Any]) -> None:
    """A transient failure with a 0.8 s backoff leaves the job scheduled for that long (its retry
    event says so), then it is promoted and runs again within PROMPT, with a 30 s poll interval."""
    app = Tenure(dsn)
    attempts: list[float] = []

    @app.task(name="flaky", backoff=Backoff(base=0.8, cap=0.8, jitter=0.0))
    async def flaky(ctx: JobContext) -> None:
        attempts.append(time.monotonic())
        if ctx.attempt == 1:
            raise tenure.Transient("try again")

    job = await app.enqueue(flaky)
    seen: set[str] = set()
    async with running(app):
        for _ in range(300):
            seen.add(await state_of(db, job.id))
            if len(attempts) == 2:
                break
            await asyncio.sleep(0.01)
    assert len(attempts) == 2, attempts
    assert "scheduled" in seen, seen
    assert 0.8 <= attempts[1] - attempts[0] <= 0.8 + PROMPT, attempts
    retry = await (
        await db.execute("SELECT event, to_state::text FROM tenure.job_events WHERE job_id = %s", (job.id,))
    ).fetchall()
    assert retry == [("retry", "scheduled")]


async def test_a_scheduled_job_can_be_cancelled_and_never_runs(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """Cancelling a scheduled job makes it cancelled (audited); promotion then has nothing to move."""
    now = await (await db.execute("SELECT now()")).fetchone()
    assert now is not None
    [job] = await queries.job_insert_many(db, [JobSpec(task="t", delay=60)])
    cancelled = await ControlQueries("tenure").cancel_many(
        db, [job.id], max_jobs=1, actor="op", reason="not needed"
    )
    assert [r.id for r in cancelled.moved] == [job.id]
    later = now[0].replace(year=now[0].year + 1)
    assert (await queries.job_promote_due(db, limit=10, now=later)).promoted == 0
    stored = await queries.job_get(db, job.id)
    assert stored is not None and stored.state is JobState.CANCELLED

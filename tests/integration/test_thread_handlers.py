"""Plain-function (thread) handlers: a thread that outlives its lease keeps its slot until it
returns, learns of the loss at its next ctx.check(), and is never given back at shutdown while
its code still runs."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from _inprocess import events, job_row, running, wait_state
from psycopg import AsyncConnection

from tenure import JobContext, LeaseLost, Tenure, WorkerOptions


async def test_a_thread_past_its_lease_keeps_its_slot_so_the_next_job_is_not_starved(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Two threads ignore their 1 s leases for 3 s on a 2-slot worker: the quick job behind them is
    claimed only when a thread returns, and succeeds on its first attempt."""
    app = Tenure(dsn)

    @app.task(name="stubborn")
    def stubborn(ctx: JobContext, seconds: float) -> None:
        time.sleep(seconds)  # never checks its lease

    @app.task(name="quick")
    def quick(ctx: JobContext) -> None:
        pass

    async with running(app, lease_seconds=1.0, concurrency=2):
        slow = [(await app.enqueue("stubborn", {"seconds": 3.0})).id for _ in range(2)]
        for job_id in slow:
            await wait_state(db, job_id, "running")
        fast = await app.enqueue("quick")
        row = await wait_state(db, fast.id, "succeeded", timeout=20)
        assert row["attempt_count"] == 1, row
        assert await events(db, fast.id) == []


async def test_a_thread_learns_of_its_lost_lease_at_its_next_check(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A thread handler that reports no progress loses its 1 s lease; its next ctx.check() raises
    LeaseLost, so it stops; the job's history shows the stale holder's lease_lost."""
    app = Tenure(dsn)
    seen: list[str] = []
    raised = threading.Event()

    @app.task(name="checker", max_attempts=1)
    def checker(ctx: JobContext) -> None:
        try:
            while True:
                ctx.check()
                time.sleep(0.02)
        except LeaseLost as exc:
            seen.append(exc.reason)
            raised.set()
            raise

    async with running(app, lease_seconds=1.0, concurrency=2) as worker:
        job = await app.enqueue("checker")
        await wait_state(db, job.id, "dead", timeout=20)
        assert await asyncio.to_thread(raised.wait, 5)
        assert "expired" in seen[0]
        assert worker.stats.leases_lost == 1
    history = [e[0] for e in await events(db, job.id)]
    assert "lease_lost" in history and "lease_expired" in history


async def test_shutdown_gives_back_only_jobs_whose_thread_has_stopped(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """At shutdown, a thread that checks its lease stops and its job goes back to pending; a thread
    that never checks keeps running, so its job keeps its lease (no second run can start)."""
    app = Tenure(dsn)
    stubborn_done = threading.Event()

    @app.task(name="polite")
    def polite(ctx: JobContext) -> None:
        while True:
            ctx.check()
            time.sleep(0.02)

    @app.task(name="deaf")
    def deaf(ctx: JobContext) -> None:
        time.sleep(2.5)
        stubborn_done.set()

    worker = app.worker(WorkerOptions(poll_interval=0.05, lease_seconds=30.0, shutdown_grace=0.3))
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.started.wait(), 10)
    stops = await app.enqueue("polite")
    keeps = await app.enqueue("deaf")
    for job_id in (stops.id, keeps.id):
        await wait_state(db, job_id, "running")
    worker.stop()
    await asyncio.wait_for(run, 15)
    assert not stubborn_done.is_set(), "the deaf thread should still be running"
    assert worker.stuck_threads == 1

    given_back = await job_row(db, stops.id)
    assert (given_back["state"], given_back["attempt_count"]) == ("pending", 0)
    assert [e[0] for e in await events(db, stops.id)] == ["released"]
    held = await job_row(db, keeps.id)
    assert (held["state"], held["lease_owner"]) == ("running", worker.options.worker_id)
    assert await events(db, keeps.id) == []
    await asyncio.to_thread(stubborn_done.wait, 5)
    await app.close()


async def test_a_thread_handler_past_its_max_runtime_is_recorded_by_its_own_worker(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A thread handler that keeps reporting progress past max_runtime: its worker writes
    MAX_RUNTIME at the deadline (no LEASE_EXPIRED from recovery), and its next check raises."""
    app = Tenure(dsn)
    stopped = threading.Event()

    @app.task(name="endless", max_runtime_seconds=1.5, lease_seconds=5.0, max_attempts=1)
    def endless(ctx: JobContext) -> None:
        step = 0
        try:
            while True:
                step += 1
                ctx.progress(step)
                time.sleep(0.05)
        finally:
            stopped.set()

    async with running(app, concurrency=2):
        job = await app.enqueue("endless")
        started = time.monotonic()
        row = await wait_state(db, job.id, "dead", timeout=20)
        took = time.monotonic() - started
    assert row["last_error_code"] == "MAX_RUNTIME", row
    assert took < 5.0, f"MAX_RUNTIME was written {took:.1f}s after the claim of a 1.5 s runtime"
    history = await events(db, job.id)
    assert [(e[0], e[4]) for e in history if e[0] != "lease_lost"] == [("dead", "MAX_RUNTIME")]
    assert await asyncio.to_thread(stopped.wait, 5)

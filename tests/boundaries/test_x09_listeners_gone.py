"""X9: NOTIFY is only a hint. With every listener disconnected (or none at all) the periodic
poll still drains committed jobs; with a listener, NOTIFY wakes an idle worker long before
its poll would have."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg
import pytest
from _harness import job_row, rows, states, wait_for, wait_until

import tenure
from tenure.db.queries import Queries

POLL = 0.3
#: "A few poll intervals", with slack for a busy machine: a bound, not a benchmark.
DRAIN_BOUND = 10 * POLL + 2


async def listener_pids(db: psycopg.AsyncConnection[Any]) -> list[int]:
    """Backends of this database whose last statement was a LISTEN (the workers' listeners)."""
    found = await rows(
        db,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN %'",
    )
    return [r["pid"] for r in found]


async def enqueue_and_drain(
    db: psycopg.AsyncConnection[Any], app: tenure.Tenure, done: list[int], n: int
) -> None:
    """Enqueues n jobs (their NOTIFYs reach no listener) plus one inserted without any NOTIFY,
    and waits at most DRAIN_BOUND seconds for the worker to finish them all."""
    for i in range(n):
        await app.enqueue("x9.work", {"n": i})
    await db.execute(
        "INSERT INTO tenure.jobs (queue, task, payload) VALUES ('default', 'x9.work', %s::jsonb)",
        (json.dumps({"n": n}),),
    )

    async def drained() -> bool:
        return await states(db) == {"succeeded": n + 1}

    await wait_until(drained, timeout=DRAIN_BOUND, what=f"{n + 1} jobs to be drained without NOTIFY")
    assert sorted(done) == list(range(n + 1))


async def test_x09_polling_drains_when_every_listener_is_killed(
    db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """The worker's LISTEN backend is killed again and again; jobs enqueued meanwhile still get done."""
    done: list[int] = []

    @app.task(name="x9.work")
    async def work(ctx: tenure.JobContext, n: int) -> None:
        done.append(n)

    worker = await start_worker(app, lease_seconds=5, poll_interval=POLL, listen=True)
    assert worker.listener is not None
    await asyncio.wait_for(worker.listener.connected.wait(), 10)
    first = await wait_until(lambda: listener_pids(db), timeout=10, what="the worker's LISTEN backend")
    assert len(first) == 1

    killed: list[int] = []
    stop = asyncio.Event()

    async def kill_listeners() -> None:
        """Every LISTEN backend of this database is terminated as soon as it shows up."""
        async with await psycopg.AsyncConnection.connect(db.info.dsn, autocommit=True) as conn:
            while not stop.is_set():
                for pid in await listener_pids(conn):
                    await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    killed.append(pid)
                await asyncio.sleep(0.02)

    killer = asyncio.create_task(kill_listeners())
    try:
        await wait_for(lambda: killed, timeout=5, what="the listener to be terminated")
        listener = worker.listener
        await wait_for(lambda: not listener.connected.is_set(), timeout=5, what="the worker to notice")
        await enqueue_and_drain(db, app, done, 10)
    finally:
        stop.set()
        await killer
    assert first[0] in killed
    assert worker.stats.claim_errors == 0


async def test_x09_polling_alone_drains_committed_jobs(
    db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """With listen disabled (no LISTEN backend at all) jobs are still done within a few poll intervals."""
    done: list[int] = []

    @app.task(name="x9.work")
    async def work(ctx: tenure.JobContext, n: int) -> None:
        done.append(n)

    worker = await start_worker(app, lease_seconds=5, poll_interval=POLL, listen=False)
    assert worker.listener is None
    await asyncio.sleep(POLL)  # let the start-up claim pass: from now on only the poll finds work
    assert await listener_pids(db) == []
    await enqueue_and_drain(db, app, done, 10)


@pytest.mark.slow
async def test_x09_notify_wakes_an_idle_worker_long_before_its_poll(
    db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """With a 60 s poll, an enqueued job starts within seconds (NOTIFY); one inserted without NOTIFY waits."""
    started: dict[int, float] = {}

    @app.task(name="x9.wake")
    async def wake(ctx: tenure.JobContext) -> None:
        started[ctx.job_id] = time.monotonic()

    long_poll = 60.0
    worker = await start_worker(app, lease_seconds=5, poll_interval=long_poll, listen=True)
    assert worker.listener is not None
    await asyncio.wait_for(worker.listener.connected.wait(), 10)
    await asyncio.sleep(0.3)  # the claims triggered by start-up and by the listener's connect pass

    enqueued_at = time.monotonic()
    job = await app.enqueue("x9.wake")
    await wait_for(lambda: job.id in started, timeout=long_poll / 4, what="NOTIFY to wake the worker")
    latency = started[job.id] - enqueued_at
    assert latency < long_poll / 20, f"the job started {latency:.2f}s after enqueue; the poll is {long_poll}s"

    # Control: the wake-up came from NOTIFY, not from some other claim. A job committed without
    # NOTIFY sits untouched (the worker is idle and its next poll is a minute away) ...
    async def succeeded() -> bool:
        return (await job_row(db, job.id))["state"] == "succeeded"

    await wait_until(succeeded, timeout=5, what="the first job to complete")
    await asyncio.sleep(0.3)  # the claim after the freed slot passes
    [silent] = await rows(
        db, "INSERT INTO tenure.jobs (queue, task) VALUES ('default', 'x9.wake') RETURNING id"
    )
    await asyncio.sleep(1.5)
    assert (await job_row(db, silent["id"]))["state"] == "pending"
    # ... until a NOTIFY for its queue arrives.
    await Queries("tenure").queue_notify(db, ["default"])
    await wait_for(lambda: silent["id"] in started, timeout=5, what="a bare NOTIFY to wake the worker")
    # An idle worker with a long poll still stops at once: stop() wakes the claim loop.
    await start_worker.stop(worker, timeout=5)

"""A handler's own exception raised inside ctx.atomic is classified as the handler raised it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg import AsyncConnection

import tenure
from tenure import JobContext, Tenure, WorkerOptions


class OrderExists(tenure.Permanent):
    """The order was placed already: retrying cannot help."""


async def wait_finished(db: AsyncConnection[Any], job_id: int, timeout: float = 15) -> tuple[Any, ...]:
    deadline = time.monotonic() + timeout
    while True:
        cur = await db.execute(
            "SELECT state::text, attempt_count, last_error_code, last_error FROM tenure.jobs WHERE id = %s",
            (job_id,),
        )
        row = await cur.fetchone()
        assert row is not None
        if row[0] in ("succeeded", "dead") or time.monotonic() > deadline:
            return tuple(row)
        await asyncio.sleep(0.05)


async def run_one(app: Tenure, db: AsyncConnection[Any], job_id: int) -> tuple[Any, ...]:
    worker = app.worker(WorkerOptions(poll_interval=0.05, shutdown_grace=2.0))
    running = asyncio.create_task(worker.run())
    try:
        return await wait_finished(db, job_id)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)
        await app.close()


async def test_permanent_raised_from_a_unique_violation_in_atomic_is_dead_at_once(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """An async handler turning a 23505 in ctx.atomic's savepoint into a Permanent is dead after one
    attempt with the Permanent's code, not retried as an unknown database error."""
    await db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    await db.execute("INSERT INTO orders VALUES (7)")
    app = Tenure(dsn)

    @app.task(name="orders.place", max_attempts=5)
    async def place(ctx: JobContext, order_id: int) -> None:
        async def write(tx: tenure.AsyncTransaction) -> None:
            try:
                async with tx.savepoint():
                    await tx.execute("INSERT INTO orders VALUES (%s)", (order_id,))
            except psycopg.errors.UniqueViolation:
                raise OrderExists(f"order {order_id} exists", code="ORDER_EXISTS") from None

        await ctx.atomic(write)

    job = await app.enqueue(place, {"order_id": 7})
    state, attempts, code, error = await run_one(app, db, job.id)
    assert (state, attempts, code) == ("dead", 1, "ORDER_EXISTS")
    assert "order 7 exists" in error


async def test_permanent_raised_in_atomic_sync_from_a_thread_handler_is_dead_at_once(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The same for a plain-function handler (run in a thread) using ctx.atomic_sync, with no
    savepoint: `raise ... from exc` inside the aborted transaction still reports the Permanent."""
    await db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    await db.execute("INSERT INTO orders VALUES (7)")
    app = Tenure(dsn)

    @app.task(name="orders.place_sync", max_attempts=5)
    def place(ctx: JobContext, order_id: int) -> None:
        def write(tx: tenure.SyncTransaction) -> None:
            try:
                tx.execute("INSERT INTO orders VALUES (%s)", (order_id,))
            except psycopg.errors.UniqueViolation as exc:
                raise OrderExists(f"order {order_id} exists", code="ORDER_EXISTS") from exc

        ctx.atomic_sync(write)

    job = await app.enqueue(place, {"order_id": 7})
    state, attempts, code, error = await run_one(app, db, job.id)
    assert (state, attempts, code) == ("dead", 1, "ORDER_EXISTS")
    assert "order 7 exists" in error

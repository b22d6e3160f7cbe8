"""Tasks with and without their own lease settings run side by side in one real worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from psycopg import AsyncConnection

from tenure import JobContext, Tenure, WorkerOptions


async def wait_states(db: AsyncConnection[Any], ids: list[int], timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        cur = await db.execute("SELECT state::text FROM tenure.jobs WHERE id = ANY(%s) ORDER BY id", (ids,))
        states = [r[0] for r in await cur.fetchall()]
        if all(s in ("succeeded", "dead") for s in states) or time.monotonic() > deadline:
            return states
        await asyncio.sleep(0.05)


async def run_until_done(app: Tenure, db: AsyncConnection[Any], ids: list[int], **options: Any) -> list[str]:
    worker = app.worker(WorkerOptions(poll_interval=0.05, shutdown_grace=2.0, **options))
    running = asyncio.create_task(worker.run())
    try:
        return await wait_states(db, ids)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)
        await app.close()


async def test_int_lease_settings_beside_a_task_without_them_both_run(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The README's shape: lease_seconds=30, max_runtime_seconds=3600 (ints) beside a task without
    them; a worker serving both queues claims and finishes both jobs."""
    app = Tenure(dsn)
    ran: list[str] = []

    @app.task(queue="emails", max_attempts=5)
    async def send_receipt(ctx: JobContext, order_id: int, email: str) -> None:
        ran.append(f"receipt {order_id}")

    @app.task(queue="files", lease_seconds=30, max_runtime_seconds=3600)
    def resize_all(ctx: JobContext, folder: str) -> None:
        ran.append(f"resize {folder}")
        ctx.progress(1)

    ids = [
        (await app.enqueue(send_receipt, {"order_id": 7, "email": "a@b.c"})).id,
        (await app.enqueue(resize_all, {"folder": "img"})).id,
    ]
    assert await run_until_done(app, db, ids) == ["succeeded", "succeeded"]
    assert sorted(ran) == ["receipt 7", "resize img"]


async def test_int_worker_lease_beside_a_task_with_a_float_lease_both_run(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """WorkerOptions(lease_seconds=20) (an int) for one task and a task's own 12.5 for another
    make one claim's lease list; both jobs are claimed and finish."""
    app = Tenure(dsn)

    @app.task(name="plain")
    async def plain(ctx: JobContext) -> None:
        return None

    @app.task(name="own_lease", lease_seconds=12.5)
    async def own_lease(ctx: JobContext) -> None:
        return None

    ids = [(await app.enqueue(plain)).id, (await app.enqueue(own_lease)).id]
    states = await run_until_done(app, db, ids, lease_seconds=20, max_runtime_seconds=600)
    assert states == ["succeeded", "succeeded"]

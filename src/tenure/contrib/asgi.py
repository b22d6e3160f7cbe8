"""Starlette and FastAPI: the app's client, and optionally a worker, for the life of the ASGI app.

    from tenure.contrib.asgi import lifespan, transaction

    api = FastAPI(lifespan=lifespan(app, worker=True))

    @api.post("/orders")
    async def place_order(order: OrderIn) -> dict[str, int]:
        async with transaction(app) as conn:       # one transaction: the order and its job
            row = await (await conn.execute(INSERT_ORDER, (order.email,))).fetchone()
            job = await send_receipt.with_options(conn=conn).enqueue(order_id=row[0])
        return {"job": job.id}

Nothing here imports Starlette or FastAPI: the lifespan protocol and the context managers are
plain asyncio. See docs/fastapi.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from tenure.app import Tenure
from tenure.model.errors import ConfigurationError
from tenure.worker.options import WorkerOptions
from tenure.worker.worker import Worker


@dataclass(frozen=True)
class TenureRuntime:
    """What `running` started: the app, and its in-process worker when one was asked for. The
    lifespan gives it to handlers as `request.state.tenure`."""

    app: Tenure
    worker: Worker | None


@contextlib.asynccontextmanager
async def running(
    app: Tenure, *, worker: bool | WorkerOptions = False, migrate: bool = False
) -> AsyncIterator[TenureRuntime]:
    """Opens `app`'s client (so a wrong DSN fails the start-up, not the first request), with
    `migrate` first applies Tenure's migrations, and with `worker` (True, or WorkerOptions) runs a
    worker in this event loop until the block ends; then stops the worker gracefully (running jobs
    get its shutdown grace, then are given back) and closes the client."""
    if migrate:
        await app.migrate()
    await app.client.pool()
    in_process: Worker | None = None
    run: asyncio.Task[Any] | None = None
    try:
        if worker:
            in_process = app.worker(worker if isinstance(worker, WorkerOptions) else None)
            run = asyncio.create_task(in_process.run(), name="tenure-worker")
            await _started(in_process, run)
        yield TenureRuntime(app, in_process)
    finally:
        if in_process is not None and run is not None and not run.done():
            in_process.stop()
            await run
        await app.close()


async def _started(worker: Worker, run: asyncio.Task[Any]) -> None:
    """Returns once the worker claims; raises what stopped it if it ended before that."""
    started = asyncio.ensure_future(worker.started.wait())
    await asyncio.wait({started, run}, return_when=asyncio.FIRST_COMPLETED)
    if not worker.started.is_set():
        started.cancel()
        run.result()  # the worker's own error (schema not migrated, database unreachable, ...)
        raise ConfigurationError(f"the in-process worker stopped as it started: {worker.failure}")


def lifespan(
    app: Tenure, *, worker: bool | WorkerOptions = False, migrate: bool = False
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A Starlette/FastAPI `lifespan=` running `running(app, ...)` for the ASGI app's life. To
    combine it with a lifespan of your own, enter `running(app, ...)` inside yours instead."""

    @contextlib.asynccontextmanager
    async def tenure_lifespan(_asgi_app: Any) -> AsyncIterator[dict[str, Any]]:
        async with running(app, worker=worker, migrate=migrate) as runtime:
            yield {"tenure": runtime}

    return tenure_lifespan


@contextlib.asynccontextmanager
async def transaction(app: Tenure) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection of `app`'s client pool in a transaction, committed when the block ends and
    rolled back when it raises (an HTTPException too): write your rows and enqueue with
    `task.with_options(conn=conn)` on it, and the job exists only if your rows do. The commit
    happens before the endpoint returns, so a response never reports work that did not commit."""
    pool = await app.client.pool()
    async with pool.connection() as conn, conn.transaction():
        yield conn

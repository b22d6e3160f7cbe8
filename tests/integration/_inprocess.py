"""Running a worker in-process for a test, and reading what it did to a job."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import AsyncConnection

import tenure
from tenure import Backoff, Tenure, WorkerOptions

FAST = Backoff(base=0.01, cap=0.05, jitter=0.0)


@contextlib.asynccontextmanager
async def running(app: Tenure, **options: Any) -> AsyncIterator[tenure.Worker]:
    """A worker of `app` running as an asyncio task for the duration of the block."""
    settings: dict[str, Any] = {"poll_interval": 0.05, "recovery_backoff": FAST, "shutdown_grace": 2.0}
    worker = app.worker(WorkerOptions(**{**settings, **options}))
    task = asyncio.create_task(worker.run())
    started = asyncio.create_task(worker.started.wait())
    await asyncio.wait([task, started], timeout=10, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        started.cancel()
        task.result()  # raises whatever stopped the worker
    assert worker.started.is_set(), "worker did not start"
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        await app.close()


async def job_row(db: AsyncConnection[Any], job_id: int) -> dict[str, Any]:
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    await cur.execute("SELECT *, state::text AS state FROM tenure.jobs WHERE id = %s", (job_id,))
    row = await cur.fetchone()
    assert row is not None
    return row


async def events(db: AsyncConnection[Any], job_id: int) -> list[tuple[Any, ...]]:
    cur = await db.execute(
        "SELECT event, from_state::text, to_state::text, token, error_code FROM tenure.job_events "
        "WHERE job_id = %s ORDER BY id",
        (job_id,),
    )
    return await cur.fetchall()


async def wait_state(
    db: AsyncConnection[Any], job_id: int, *states: str, timeout: float = 10
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        row = await job_row(db, job_id)
        if row["state"] in states:
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} stayed {row['state']} (wanted {states}): {row}")
        await asyncio.sleep(0.02)


async def eventually(condition: Any, timeout: float = 10.0, what: str = "the condition") -> None:
    """Waits until `condition()` (sync or async) is true, or fails naming `what`."""
    deadline = time.monotonic() + timeout
    for _ in range(100_000):
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")

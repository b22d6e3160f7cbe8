"""Batched, fenced completion: every successful job's write goes through here."""

from __future__ import annotations

import asyncio
import logging

import psycopg

from tenure.jobs import ClaimedJob
from tenure.runtime.services import WorkerServices

log = logging.getLogger("tenure.worker")


class Completer:
    """Collects completions and writes them in one fenced statement per batch.

    Under load many jobs finish while a write is in flight; the next write takes them all.
    Each caller learns whether its own fence held.
    """

    def __init__(self, services: WorkerServices) -> None:
        self.services = services
        self._queue: asyncio.Queue[tuple[ClaimedJob, asyncio.Future[bool]]] = asyncio.Queue()

    async def complete(self, job: ClaimedJob) -> bool:
        """True if the job is now succeeded under our lease; False if the fence refused it."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((job, done))
        return await done

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.services.options.completion_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write(batch)

    async def drain(self) -> None:
        """Writes whatever is queued (used at shutdown)."""
        batch = []
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        if batch:
            await self._write(batch)

    async def _write(self, batch: list[tuple[ClaimedJob, asyncio.Future[bool]]]) -> None:
        services = self.services
        leases = [(job.id, job.lease.token) for job, _ in batch]
        result: dict[int, bool] | None = None
        for attempt in range(1, 6):
            try:
                async with services.pool.connection() as conn:
                    result = await services.queries.job_complete_many(
                        conn, owner=services.owner, leases=leases
                    )
                break
            except (
                psycopg.OperationalError,
                psycopg.errors.SerializationFailure,
                psycopg.errors.DeadlockDetected,
            ) as exc:
                services.stats.write_errors += 1
                log.warning("completion write failed (attempt %s): %s", attempt, exc)
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        for job, done in batch:
            held = bool(result and result.get(job.id))
            if not done.done():
                done.set_result(held)

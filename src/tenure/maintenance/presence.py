"""A worker's row in the registry, and the periodic maintenance pass it runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg_pool import AsyncConnectionPool

from tenure.db.ops_queries import OpsQueries
from tenure.maintenance.retention import RetentionPolicy, prune

log = logging.getLogger("tenure.worker")


class WorkerPresence:
    """Refreshes this worker's registry row every `seen_every` seconds, runs a retention pass
    every `prune_every` seconds (first one at a random offset, so a fleet started together
    does not prune in lockstep), and removes the row when the worker stops cleanly."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        schema: str,
        *,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        busy: Callable[[], int],
        retention: RetentionPolicy | None,
        seen_every: float = 5.0,
        prune_every: float = 300.0,
    ) -> None:
        self.pool = pool
        self.schema = schema
        self.ops = OpsQueries(schema)
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.busy = busy
        self.retention = retention
        self.seen_every = seen_every
        self.prune_every = prune_every

    async def seen(self) -> None:
        async with self.pool.connection() as conn:
            await self.ops.worker_seen(
                conn,
                worker_id=self.worker_id,
                queues=self.queues,
                concurrency=self.concurrency,
                busy=self.busy(),
            )

    async def run(self) -> None:
        next_prune = time.monotonic() + random.uniform(0.1, 1.0) * self.prune_every
        try:
            while True:
                try:
                    await self.seen()
                except Exception as exc:
                    log.warning("could not refresh the worker registry: %s", type(exc).__name__)
                if self.retention is not None and time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + self.prune_every
                    try:
                        report = await prune(self.pool, self.schema, self.retention)
                        if any(report.as_dict().values()):
                            log.info("retention pass: %s", report.as_dict())
                    except Exception as exc:
                        log.warning("retention pass failed: %s", type(exc).__name__)
                await asyncio.sleep(self.seen_every)
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    async with self.pool.connection() as conn:
                        await self.ops.worker_forget(conn, self.worker_id)

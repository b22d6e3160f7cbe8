"""A worker's row in the registry, and the periodic maintenance pass it runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tenure.db.ops_queries import OpsQueries
from tenure.maintenance.retention import RetentionPolicy, prune
from tenure.runtime.supervisor import ServiceHealth, describe_error

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
        failing: Callable[[], dict[str, Any]] = dict,
        seen_every: float = 5.0,
        prune_every: float = 300.0,
        connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]] | None = None,
    ) -> None:
        self.pool = pool
        self.schema = schema
        self.ops = OpsQueries(schema)
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.busy = busy
        self.failing = failing
        self.retention = retention
        self.connection = connection or pool.connection
        self.health = ServiceHealth("registry refresh", critical=False)
        self.retention_health = ServiceHealth("retention", critical=False)
        self.seen_every = seen_every
        self.prune_every = prune_every

    async def seen(self) -> None:
        async with self.connection() as conn:
            await self.ops.worker_seen(
                conn,
                worker_id=self.worker_id,
                queues=self.queues,
                concurrency=self.concurrency,
                busy=self.busy(),
                failing=self.failing() or None,
            )

    async def prune_once(self) -> None:
        if self.retention is None:
            return
        try:
            report = await prune(self.pool, self.schema, self.retention)
        except psycopg.errors.InsufficientPrivilege:
            log.warning(
                "retention is off in this worker: its role may not DELETE finished jobs "
                "(run `tenure prune` from a role that may, or grant DELETE on the jobs table)"
            )
            self.retention = None
            return
        if any(report.as_dict().values()):
            log.info("retention pass: %s", report.as_dict())

    async def run(self) -> None:
        next_prune = time.monotonic() + random.uniform(0.1, 1.0) * self.prune_every
        try:
            while True:
                await self._guarded(self.health, self.seen)
                if self.retention is not None and time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + self.prune_every
                    await self._guarded(self.retention_health, self.prune_once)
                await asyncio.sleep(self.seen_every)
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    async with self.pool.connection() as conn:
                        await self.ops.worker_forget(conn, self.worker_id)

    @staticmethod
    async def _guarded(health: ServiceHealth, work: Callable[[], Awaitable[None]]) -> None:
        """One pass of a maintenance duty; its failure is logged and counted, never raised."""
        try:
            await work()
        except Exception as exc:
            health.failed(exc)
            log.warning(
                "%s failed (%s in a row): %s", health.name, health.consecutive_failures, describe_error(exc)
            )
        else:
            health.succeeded()

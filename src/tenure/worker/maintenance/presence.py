"""A worker's row in the registry, and the retention pass each worker runs now and then."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tenure.db.ops_queries import OpsQueries
from tenure.worker.health import ServiceHealth
from tenure.worker.maintenance.retention import PruneReport, RetentionPolicy, prune
from tenure.worker.service import Service

log = logging.getLogger("tenure.worker")


class WorkerPresence(Service):
    """Refreshes this worker's registry row every `seen_every` seconds (what `tenure status`
    shows: its queues, how busy it is, its failing services), records the tasks it runs when the
    row is created, and removes the row when the worker stops cleanly."""

    name = "registry refresh"

    def __init__(
        self,
        schema: str,
        health: ServiceHealth,
        *,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        busy: Callable[[], int],
        connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]],
        failing: Callable[[], dict[str, Any]] = dict,
        seen_every: float = 5.0,
        tasks: Sequence[str] | None = None,
    ) -> None:
        self.ops = OpsQueries(schema)
        self.health = health
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.busy = busy
        self.failing = failing
        self.connection = connection
        self.seen_every = seen_every
        #: The tasks this worker runs, recorded with its row; None once the schema proved to have
        #: no column for them (before migration 0021).
        self.tasks = None if tasks is None else sorted(tasks)

    async def run_once(self) -> None:
        async with self.connection() as conn:
            created = await self.ops.worker_seen(
                conn,
                worker_id=self.worker_id,
                queues=self.queues,
                concurrency=self.concurrency,
                busy=self.busy(),
                failing=self.failing() or None,
            )
            if created and self.tasks is not None:
                await self._record_tasks(conn, self.tasks)

    async def _record_tasks(self, conn: AsyncConnection[Any], tasks: list[str]) -> None:
        try:
            await self.ops.worker_tasks_record(conn, self.worker_id, tasks)
        except psycopg.errors.UndefinedColumn:
            # A schema before migration 0021 (workers run on it while an upgrade waits): the row
            # lists no tasks, and counts as running every task of its queues until the restart.
            log.info("the worker registry has no task list yet: `tenure migrate` adds it")
            self.tasks = None

    def next_delay(self, result: None) -> float:
        return self.seen_every

    async def stopped(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0), self.connection() as conn:
                await self.ops.worker_forget(conn, self.worker_id)


class RetentionPass(Service):
    """Prunes finished jobs past the retention policy every `prune_every` seconds, the first
    pass at a random offset, so a fleet started together does not prune in lockstep. A role
    that may not delete turns it off, once, with a hint."""

    name = "retention"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        schema: str,
        health: ServiceHealth,
        retention: RetentionPolicy,
        *,
        prune_every: float = 300.0,
    ) -> None:
        self.pool = pool
        self.schema = schema
        self.health = health
        self.retention: RetentionPolicy | None = retention
        self.prune_every = prune_every
        self._next = self.clock.monotonic() + random.uniform(0.1, 1.0) * prune_every

    async def run_once(self) -> PruneReport | None:
        if self.retention is None or self.clock.monotonic() < self._next:
            return None
        self._next = self.clock.monotonic() + self.prune_every
        try:
            report = await prune(self.pool, self.schema, self.retention)
        except psycopg.errors.InsufficientPrivilege:
            log.warning(
                "retention is off in this worker: its role may not DELETE finished jobs "
                "(run `tenure prune` from a role that may, or grant DELETE on the jobs table)"
            )
            self.retention = None
            return None
        if any(report.as_dict().values()):
            log.info("retention pass: %s", report.as_dict())
        return report

    def next_delay(self, result: PruneReport | None) -> float:
        if self.retention is None:
            return 3600.0  # off: nothing to do until the worker restarts
        return max(0.0, self._next - self.clock.monotonic())

"""What the worker's parts share: the pool, the queries, the worker's identity and counters."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from tenure.db.queries import Queries
from tenure.db.replication_queries import ReplicationQueries
from tenure.db.sync.pool import open_pool as open_sync_pool
from tenure.model.jobs import ClaimedJob
from tenure.telemetry.logging_context import job_fields
from tenure.worker.events import Events
from tenure.worker.health import ServiceHealthBoard
from tenure.worker.options import WorkerOptions
from tenure.worker.stats import WorkerStats

log = logging.getLogger("tenure.worker")


class WorkerServices:
    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Any],
        queries: Queries,
        options: WorkerOptions,
        dsn: str,
        events: Events | None = None,
    ) -> None:
        self.pool = pool
        self.queries = queries
        self.options = options
        self.owner = options.worker_id
        self.replication = ReplicationQueries(queries.schema)
        self.stats = WorkerStats()
        self.events = events or Events()
        self.dsn = dsn
        self.loop = asyncio.get_running_loop()
        self.health = ServiceHealthBoard(options.service_failure_limit)
        self._sync_pool: ConnectionPool[Any] | None = None
        self._sync_lock = threading.Lock()
        self._background: set[asyncio.Task[None]] = set()
        #: Told when this worker scheduled a job (a retry's or a recovery's backoff) for a database
        #: time; the worker points it at its promoter, so the job is promoted when due.
        self.scheduled: Callable[[datetime], None] = lambda due: None

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection for one of the worker's own statements, bounded in time.

        The bound covers the wait for a pool slot and the statement: past it the statement is
        cancelled on the server and TimeoutError raised, so no write of the worker can hang on
        a lock held elsewhere, a hung server or a black-holed connection.
        """
        async with asyncio.timeout(self.options.statement_bound), self.pool.connection() as conn:
            yield conn

    @property
    def require_sync_replication(self) -> bool:
        return bool(self.options.require_sync_replication)

    def in_background(self, work: Any) -> None:
        """Runs a best-effort coroutine (an audit record) without making its caller wait."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def sync_pool(self) -> ConnectionPool[Any]:
        """A blocking pool for plain-function handlers' transactions, opened on first use."""
        with self._sync_lock:
            if self._sync_pool is None:
                # The blocking twin of the worker's own pool: the same set-up and checks.
                self._sync_pool = open_sync_pool(
                    self.dsn, min_size=1, max_size=self.options.concurrency, name="tenure-sync"
                )
            return self._sync_pool

    async def record_fencing_loss(self, job: ClaimedJob, code: str) -> None:
        self.stats.fencing_losses += 1
        self.events.fencing_loss(job, code)
        log.warning(
            "fencing loss: job %s token %s (%s)",
            job.id,
            job.lease.token,
            code,
            extra=job_fields(job, self.owner),
        )
        try:
            async with self.connection() as conn:
                await self.queries.fencing_lost_record(
                    conn, job_id=job.id, token=job.lease.token, owner=self.owner, error_code=code
                )
        except Exception:
            log.exception("could not record the fencing loss of job %s", job.id)

    def record_fencing_loss_threadsafe(self, job: ClaimedJob, code: str) -> None:
        asyncio.run_coroutine_threadsafe(self.record_fencing_loss(job, code), self.loop).result()

    async def settled(self, timeout: float = 1.0) -> None:
        """Waits, up to `timeout` seconds, for the best-effort work under way (a result stored
        after its job's own transaction)."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout)

    async def close(self) -> None:
        await self.settled()
        if self._sync_pool is not None:
            await asyncio.to_thread(self._sync_pool.close)

"""Promotion: scheduled jobs become pending when due, and waiting jobs when their wait's deadline
passes. Every worker runs it; many at once is safe (SKIP LOCKED), and whoever promotes a job
notifies its queue."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection

from tenure.db.queries import Promotion
from tenure.db.wait_queries import WaitQueries
from tenure.worker.health import describe_error
from tenure.worker.service import Service, set_within
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

R = TypeVar("R")

#: The shortest sleep between two promotion passes (seconds): jobs due within it are promoted
#: together, so a steady stream of due times costs at most this many statements per second.
PROMOTION_RESOLUTION = 0.01


class Promoter(Service):
    """Sleeps until the next scheduled job is due or the poll interval passes, whichever is
    sooner, and is woken earlier by `expect` when a job is scheduled for an earlier time."""

    name = "promoter"

    def __init__(self, services: WorkerServices, wake_claimer: Callable[[], None] = lambda: None) -> None:
        self.services = services
        self.wake_claimer = wake_claimer
        self._wake = asyncio.Event()
        # Database time at the last pass, and the local monotonic clock at that moment: only the
        # duration between a due time and that pass crosses to the local clock.
        self._db_base: datetime | None = None
        self._local_base = 0.0
        self._wake_at = 0.0
        # The earliest due time announced while a pass ran: its statement may not have seen it.
        self._expected: datetime | None = None
        self.health = services.health.service(self.name)
        self.waits = WaitQueries(services.queries.schema)
        # Not critical, and apart from the promoter's own health: deadlines that keep failing to
        # end must not hold back scheduled jobs, nor stop the worker.
        self.deadline_health = services.health.service("wait deadlines", critical=False)

    async def run_once(self, *, now: datetime | None = None) -> Promotion:
        """Promotes every job due at `now` (database time by default), and wakes every waiting job
        whose deadline passed by then, in batches."""
        self._expected = None
        services, batch = self.services, self.services.options.promotion_batch
        total, result = await self._in_batches(
            lambda conn: services.queries.job_promote_due(conn, limit=batch, now=now), lambda r: r.promoted
        )
        next_due, timed_out = result.next_due, 0
        try:
            timed_out, expired = await self._in_batches(
                lambda conn: self.waits.expire_due(conn, limit=batch, now=now), lambda r: r.timed_out
            )
            if expired.next_due is not None and (next_due is None or expired.next_due < next_due):
                next_due = expired.next_due
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            # A schema before waits, or before step conditions: a worker runs on older ones while
            # `tenure migrate` runs.
            pass
        except Exception as exc:
            self.deadline_health.failed(exc)
            log.warning(
                "ending waits at their deadline failed (tried again next pass): %s", describe_error(exc)
            )
        else:
            self.deadline_health.succeeded()
        services.stats.promoted += total
        services.stats.waits_timed_out += timed_out
        if total or timed_out:
            self.wake_claimer()
        return Promotion(total, next_due, result.db_now, timed_out)

    async def _in_batches(
        self, run: Callable[[AsyncConnection[Any]], Awaitable[R]], moved: Callable[[R], int]
    ) -> tuple[int, R]:
        """Runs `run` on a pooled connection until a pass moves fewer than a batch: how many moved
        in all, and the last pass."""
        total = 0
        while True:
            async with self.services.connection() as conn:
                result = await run(conn)
            total += moved(result)
            if moved(result) < self.services.options.promotion_batch:
                return total, result

    def expect(self, due: datetime) -> None:
        """A job was scheduled for `due` (database time): wake by then if that is sooner."""
        if self._expected is None or due < self._expected:
            self._expected = due
        if self._db_base is None:
            self._wake.set()
            return
        local_due = self._local_base + (due - self._db_base).total_seconds()
        if local_due < self._wake_at:
            self._wake_at = local_due
            self._wake.set()

    def next_delay(self, result: Promotion) -> float:
        """Until the next due job, or a job announced meanwhile, or the poll interval."""
        self._db_base, self._local_base = result.db_now, self.clock.monotonic()
        sleep = self.services.options.poll_interval
        for due in (result.next_due, self._expected):
            if due is not None:
                sleep = min(sleep, (due - result.db_now).total_seconds())
        self._wake_at = self._local_base + max(PROMOTION_RESOLUTION, sleep)
        return self._wake_at - self._local_base

    def failed(self, exc: BaseException) -> float:
        self._db_base = None  # the next due time is unknown: any announcement wakes the promoter
        self._wake_at = self.clock.monotonic() + self.health.backoff()
        return self.health.backoff()

    async def wait(self, delay: float) -> None:
        """Until `_wake_at`, which `expect` may bring forward; a wake-up earlier than the
        resolution is deferred to it, so that a burst of schedules costs one pass, not one each."""
        while (left := self._wake_at - self.clock.monotonic()) > 0:
            self._wake.clear()
            await set_within(self._wake, left)
            if self._db_base is None:
                return  # scheduled for an unknown time: look now
        if self._db_base is not None:
            await self.clock.sleep(max(0.0, self._local_base + PROMOTION_RESOLUTION - self.clock.monotonic()))

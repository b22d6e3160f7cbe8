"""Promotion: scheduled jobs become pending when due. Every worker runs it; many at once is safe
(SKIP LOCKED), and whoever promotes a job notifies its queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime

from tenure.db.queries import Promotion
from tenure.runtime.services import WorkerServices
from tenure.runtime.supervisor import describe_error

log = logging.getLogger("tenure.worker")

#: The shortest sleep between two promotion passes (seconds): jobs due within it are promoted
#: together, so a steady stream of due times costs at most this many statements per second.
PROMOTION_RESOLUTION = 0.01


class Promoter:
    """Sleeps until the next scheduled job is due or the poll interval passes, whichever is
    sooner, and is woken earlier by `expect` when a job is scheduled for an earlier time."""

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
        self.health = services.health.service("promoter")

    async def run_once(self, *, now: datetime | None = None) -> Promotion:
        """Promotes every job due at `now` (database time by default), in batches."""
        services, batch = self.services, self.services.options.promotion_batch
        total = 0
        while True:
            async with services.connection() as conn:
                result = await services.queries.job_promote_due(conn, limit=batch, now=now)
            total += result.promoted
            if result.promoted < batch:
                break
        services.stats.promoted += total
        if total:
            self.wake_claimer()
        return Promotion(total, result.next_due, result.db_now)

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

    def _plan(self, result: Promotion) -> None:
        self._db_base, self._local_base = result.db_now, time.monotonic()
        sleep = self.services.options.poll_interval
        for due in (result.next_due, self._expected):
            if due is not None:
                sleep = min(sleep, (due - result.db_now).total_seconds())
        self._wake_at = self._local_base + max(PROMOTION_RESOLUTION, sleep)

    async def run(self) -> None:
        """Promotes for ever; an exception is logged, counted in the promoter's health and
        backed off, never the end of the loop."""
        health = self.health
        while True:
            try:
                self._expected = None
                self._plan(await self.run_once())
                health.succeeded()
            except Exception as exc:
                health.failed(exc)
                log.warning(
                    "promotion of scheduled jobs failed (%s in a row): %s",
                    health.consecutive_failures,
                    describe_error(exc),
                )
                self._db_base = None
                self._wake_at = time.monotonic() + health.backoff()
            while (left := self._wake_at - time.monotonic()) > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=left)
                if self._db_base is None:
                    break  # scheduled for an unknown time: look now
            # A wake-up earlier than the resolution is deferred to it, so that a burst of
            # schedules costs one pass, not one each.
            if self._db_base is not None:
                await asyncio.sleep(max(0.0, self._local_base + PROMOTION_RESOLUTION - time.monotonic()))

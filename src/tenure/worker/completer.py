"""Batched, fenced completion: every successful job's write goes through here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection

from tenure.db.replication_queries import Acknowledgement
from tenure.model.jobs import ClaimedJob
from tenure.telemetry.tracing import batch_span, set_batch_size
from tenure.worker.service import Service
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: How long a row locked elsewhere waits before its completion is tried again, at first.
BUSY_RETRY = 0.05
#: How often a failing completer tests the write path when it has nothing to write.
PROBE_EVERY = 1.0


class CompletionOutcome:
    DONE = "done"
    """Succeeded under this lease."""
    LOST = "lost"
    """The fence refused it: another worker holds or has finished the job."""
    EXPIRED = "expired"
    """The lease ran out (by the local estimate) before the write could be made."""
    NOT_REPLICATED = "not_replicated"
    """Succeeded on the primary, but no synchronous standby is known to have it: PostgreSQL said
    the commit might not be replicated, or (require_sync_replication) no standby confirmed it."""


@dataclass
class _Pending:
    job: ClaimedJob
    expires: float  # local monotonic estimate of the lease's end: past it, writing is pointless
    done: asyncio.Future[str]
    result: Any = None  # the job's result, checked JSON; None stores none
    busy_tries: int = 0
    not_before: float = field(default=0.0)


class Completer(Service):
    """Collects completions and writes them in one fenced statement per batch.

    Under load many jobs finish while a write is in flight; the next write takes them all. Each
    caller learns its own outcome. A write that fails (connection lost, server read-only,
    permission revoked, any error) is retried with backoff until each job's lease runs out, and
    the completer goes on: one bad write can never stop completions for good. A row locked
    elsewhere is retried alone, without holding up the rest of the batch.
    """

    name = "completer"

    def __init__(self, services: WorkerServices) -> None:
        self.services = services
        self.health = services.health.service(self.name)
        # A list and an event rather than an asyncio.Queue: one append per job, and a batch is
        # taken as a slice.
        self._queued: list[_Pending] = []
        self._arrived = asyncio.Event()
        self._retry: list[_Pending] = []

    async def complete(self, job: ClaimedJob, expires: float, result: Any = None) -> str:
        """A CompletionOutcome; `expires` is the local monotonic estimate of the lease's end,
        `result` the job's result to store with it (checked JSON, or None)."""
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queued.append(_Pending(job, expires, done, result))
        self._arrived.set()
        return await done

    async def run_once(self) -> int:
        """Waits for completions (or a retry falling due) and writes one batch; a write that
        fails raises, its jobs put back for a retry (or settled EXPIRED past their lease).
        Returns how many completions the pass wrote (or tried to write)."""
        batch = await self._next_batch()
        if batch:
            await self._write(batch)
        elif self.health.failing:
            await self._probe()
        return len(batch)

    def next_delay(self, result: int) -> float:
        return 0.0  # the next pass waits for completions itself

    def failed(self, exc: BaseException) -> float:
        # Retries fall due on their own schedule (_again); this only spaces the passes.
        return min(self.health.backoff(), 0.5)

    async def drain(self) -> None:
        """Writes whatever is queued or waiting for a retry (used at shutdown)."""
        batch = self._retry + self._take_queued([])
        self._retry = []
        if batch:
            with contextlib.suppress(Exception):  # each job is settled, written or EXPIRED
                await self._write(batch, final=True)

    def _take_queued(self, batch: list[_Pending]) -> list[_Pending]:
        room = self.services.options.completion_batch - len(batch)
        if room > 0:
            batch.extend(self._queued[:room])
            del self._queued[:room]
        if not self._queued:
            self._arrived.clear()
        return batch

    async def _next_batch(self) -> list[_Pending]:
        """Queued completions and retries that are due; waits for either when there are none."""
        now = self.clock.monotonic()
        if not self._queued and not any(p.not_before <= now for p in self._retry):
            waits = [p.not_before - now for p in self._retry]
            timeout = min(waits) if waits else (PROBE_EVERY if self.health.failing else None)
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except TimeoutError:
                return self._due()
        return self._due() + self._take_queued([])

    def _due(self) -> list[_Pending]:
        now = self.clock.monotonic()
        due = [p for p in self._retry if p.not_before <= now]
        self._retry = [p for p in self._retry if p.not_before > now]
        return due

    async def _write(self, batch: list[_Pending], *, final: bool = False) -> None:
        """One attempt at the batch. Whatever happens, every entry is either settled or put back
        for a retry: no caller is ever left waiting on a write nobody will make."""
        services = self.services
        try:
            with batch_span("complete") as span:
                set_batch_size(span, len(batch))
                async with services.connection() as conn, self._acknowledged(conn) as ack:
                    result = await services.queries.job_complete_many(
                        conn,
                        owner=services.owner,
                        leases=[(p.job.id, p.job.lease.token) for p in batch],
                        results={
                            (p.job.id, p.job.lease.token): p.result for p in batch if p.result is not None
                        },
                    )
        except Exception:
            services.stats.write_errors += 1
            # The backoff after this failure, which the health counts once this raises.
            delay = self.health.backoff(self.health.consecutive_failures + 1)
            for pending in batch:
                self._again(pending, delay, final)
            raise
        for pending in batch:
            outcome = result.get((pending.job.id, pending.job.lease.token), CompletionOutcome.LOST)
            if outcome == CompletionOutcome.DONE and not ack.replicated:
                outcome = CompletionOutcome.NOT_REPLICATED
            if outcome == "busy":
                pending.busy_tries += 1
                self._again(pending, min(1.0, BUSY_RETRY * 2 ** min(pending.busy_tries, 5)), final)
            else:
                self._settle(pending, outcome)

    def _acknowledged(self, conn: AsyncConnection[Any]) -> AbstractAsyncContextManager[Acknowledgement]:
        """Whether the batch's commit is known to be on a synchronous standby (within half the
        statement bound, which also covers the wait for the standby's confirmation)."""
        services = self.services
        return services.replication.acknowledged(
            conn, strict=services.require_sync_replication, within=services.options.statement_bound / 2
        )

    def _again(self, pending: _Pending, delay: float, final: bool) -> None:
        if final or self.clock.monotonic() + delay >= pending.expires:
            self._settle(pending, CompletionOutcome.EXPIRED)
            return
        pending.not_before = self.clock.monotonic() + delay
        self._retry.append(pending)

    @staticmethod
    def _settle(pending: _Pending, outcome: str) -> None:
        if not pending.done.done():
            pending.done.set_result(outcome)

    async def _probe(self) -> None:
        """An empty fenced completion: it changes no row but needs everything a real one does
        (a connection, a writable server, UPDATE on jobs), so it tells when writes work again."""
        services = self.services
        async with services.connection() as conn:
            await services.queries.job_complete_many(conn, owner=services.owner, leases=[])

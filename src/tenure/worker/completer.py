"""Batched, fenced completion: every successful job's write goes through here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection

from tenure.db.replication_queries import Acknowledgement
from tenure.model.jobs import ClaimedJob
from tenure.telemetry.tracing import batch_span, set_batch_size
from tenure.worker.health import describe_error
from tenure.worker.kept_connection import KeptConnection
from tenure.worker.service import Service, set_within
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: How long a row locked elsewhere waits before its completion is tried again, at first.
BUSY_RETRY = 0.05
#: How often a failing completer tests the write path when it has nothing to write.
PROBE_EVERY = 1.0


#: SQLSTATE classes of an error that the same completion would meet again: a value the database
#: refuses (class 22, data) or a constraint (class 23, integrity), a limit it would exceed again
#: (class 54), a raise in a trigger (class P0).
DETERMINISTIC_SQLSTATE_CLASSES = ("22", "23", "54", "P0")
#: A row's passing trouble: a lock wait that ran out, a deadlock, a serialization failure.
ROW_SQLSTATES = ("55P03", "40P01", "40001")


class CompletionRejected(Exception):
    """The database refuses this job's completion for a reason of its own row (a release that
    breaks a limit, a constraint, a trigger that raises): writing it again would fail again, so
    the job fails with the database's own error instead of waiting for its lease to expire."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(f"the database refused the completion [{sqlstate}]: {message}")
        self.sqlstate = sqlstate


class CompletionOutcome:
    DONE = "done"
    """Succeeded under this lease."""
    LOST = "lost"
    """The fence refused it: another worker holds or has finished the job."""
    EXPIRED = "expired"
    """The lease ran out (by the local estimate) before the write could be made."""
    REJECTED = "rejected"
    """The database refused this row's completion for a reason of its own (complete() raises
    CompletionRejected with it)."""
    NOT_REPLICATED = "not_replicated"
    """Succeeded on the primary, but no synchronous standby is known to have it: PostgreSQL said
    the commit might not be replicated, or (require_sync_replication) no standby confirmed it."""


#: Told a completion's outcome once it is known: the CompletionOutcome, and for REJECTED the
#: database's refusal.
Settled = Callable[[str, "CompletionRejected | None"], None]


@dataclass(slots=True)
class _Pending:
    job: ClaimedJob
    expires: float  # local monotonic estimate of the lease's end: past it, writing is pointless
    settled: Settled
    result: Any = None  # the job's result, checked JSON; None stores none
    busy_tries: int = 0
    # Set when the job's row failed alone for a reason of its own: ends its wait with this error.
    rejected: CompletionRejected | None = None
    not_before: float = field(default=0.0)
    outcome: str | None = None  # once settled


class Completer(Service):
    """Collects completions and writes them in one fenced statement per batch.

    Under load many jobs finish while a write is in flight; the next write takes them all. Each
    caller learns its own outcome. A write that fails (connection lost, server read-only,
    permission revoked, any error) is retried with backoff until each job's lease runs out, and
    the completer goes on: one bad write can never stop completions for good. A row locked
    elsewhere is retried alone, without holding up the rest of the batch.

    One bad completion costs only itself: a batch that fails for a reason that may belong to one
    of its rows (a value, limit or trigger refusing it, a lock wait run out, a deadlock) is split
    in halves, each written on its own, so the rest lands at once. A row that fails alone for a
    deterministic reason raises CompletionRejected to its caller, who fails the job with the database's error;
    one that fails alone for a passing reason (a lock wait that ran out, a deadlock) is tried
    again alone until its lease ends. Neither counts against the completer's health.
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
        #: The completions' own connection (kept_connection.py).
        self.connection = KeptConnection(
            services.pool, services.options.statement_bound, self._warm, services.queries.jobs_pages
        )

    def complete_soon(self, job: ClaimedJob, expires: float, result: Any, settled: Settled) -> None:
        """Queues `job`'s completion; `settled` is called with its outcome once that is known
        (from the completer's own task: it must not block). `expires` is the local monotonic
        estimate of the lease's end, `result` the job's result to store with it (checked JSON,
        or None). The worker's executor hands its jobs over this way: a future and a task woken
        per job to learn the outcome cost a no-op job a tenth of its worker CPU."""
        queued = self._queued
        if not queued:  # while any wait, the event is set already (_take_queued clears it)
            self._arrived.set()
        queued.append(_Pending(job, expires, settled, result))

    async def complete(self, job: ClaimedJob, expires: float, result: Any = None) -> str:
        """`complete_soon`, waited for: the CompletionOutcome, or CompletionRejected raised."""
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def settled(outcome: str, rejected: CompletionRejected | None) -> None:
            if done.done():
                return
            if rejected is not None:
                done.set_exception(rejected)
            else:
                done.set_result(outcome)

        self.complete_soon(job, expires, result, settled)
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
        try:
            if batch:
                with contextlib.suppress(Exception):  # each job is settled, written or EXPIRED
                    await self._write(batch, final=True)
        finally:
            await self.connection.release()

    async def stopped(self) -> None:
        await self.connection.release()

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
            if not await set_within(self._arrived, timeout):
                return self._due()
        return self._due() + self._take_queued([])

    def _due(self) -> list[_Pending]:
        now = self.clock.monotonic()
        due = [p for p in self._retry if p.not_before <= now]
        self._retry = [p for p in self._retry if p.not_before > now]
        return due

    async def _write(self, batch: list[_Pending], *, final: bool = False) -> None:
        """One attempt at the batch. Whatever happens, every entry is either settled or put back
        for a retry: no caller is ever left waiting on a write nobody will make. Raises only for
        a failure of the whole write path (connection, pool, server), after putting every entry
        of the batch back."""
        services = self.services
        try:
            with batch_span("complete") as span:
                set_batch_size(span, len(batch))
                async with self.connection.use() as conn, self._acknowledged(conn) as ack:
                    result = await services.queries.job_complete_many(
                        conn,
                        owner=services.owner,
                        leases=[(p.job.id, p.job.lease.token) for p in batch],
                        results={
                            (p.job.id, p.job.lease.token): p.result for p in batch if p.result is not None
                        },
                    )
        except Exception as exc:
            if _may_be_one_rows(exc):
                await self._write_apart(batch, exc, final)
                return
            services.stats.write_errors += 1
            # The backoff after this failure, which the health counts once this raises.
            delay = self.health.backoff(self.health.consecutive_failures + 1)
            for pending in batch:
                self._again(pending, delay, final)
            raise
        replicated = ack.replicated
        for pending in batch:
            outcome = result.get((pending.job.id, pending.job.lease.token), CompletionOutcome.LOST)
            if outcome == CompletionOutcome.DONE and not replicated:
                outcome = CompletionOutcome.NOT_REPLICATED
            if outcome == "busy":
                pending.busy_tries += 1
                self._again(pending, min(1.0, BUSY_RETRY * 2 ** min(pending.busy_tries, 5)), final)
            else:
                self._settle(pending, outcome)

    async def _write_apart(self, batch: list[_Pending], exc: Exception, final: bool) -> None:
        """The batch failed for a reason that may be one row's: halves are written on their own
        (so the rows that can land do, at once), and a row that fails alone is settled by itself."""
        if len(batch) > 1:
            half = len(batch) // 2
            log.warning(
                "a completion batch of %s failed (%s): writing it in halves, so one row costs only itself",
                len(batch),
                describe_error(exc),
            )
            first, second = batch[:half], batch[half:]
            try:
                await self._write(first, final=final)
            except Exception:
                # The write path failed meanwhile: the half not yet tried waits with the rest.
                delay = self.health.backoff(self.health.consecutive_failures + 1)
                for pending in second:
                    self._again(pending, delay, final)
                raise
            await self._write(second, final=final)
            return
        [pending] = batch
        sqlstate = getattr(exc, "sqlstate", None) or ""
        if sqlstate.startswith(DETERMINISTIC_SQLSTATE_CLASSES):
            pending.rejected = CompletionRejected(sqlstate, str(exc).strip())
            log.warning("job %s: the database refused its completion: %s", pending.job.id, pending.rejected)
            self._settle(pending, CompletionOutcome.REJECTED)
            return
        # A passing reason of this row's (a lock held elsewhere past the wait, a deadlock): as busy.
        pending.busy_tries += 1
        log.info(
            "job %s: its completion failed alone (%s); trying it again", pending.job.id, describe_error(exc)
        )
        self._again(pending, min(1.0, BUSY_RETRY * 2 ** min(pending.busy_tries, 5)), final)

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
        if pending.outcome is not None:
            return
        pending.outcome = outcome
        try:
            pending.settled(outcome, pending.rejected)
        except Exception:  # the caller's own fault: it must not stop the batch's other outcomes
            log.exception("job %s: handling its completion's outcome (%s) failed", pending.job.id, outcome)

    async def _warm(self, conn: AsyncConnection[Any]) -> None:
        """A completion of no jobs: what a new connection runs before it takes over the writes."""
        await self.services.queries.job_complete_many(conn, owner=self.services.owner, leases=[])

    async def _probe(self) -> None:
        """An empty fenced completion: it changes no row but needs everything a real one does
        (a connection, a writable server, UPDATE on jobs), so it tells when writes work again."""
        async with self.connection.use() as conn:
            await self._warm(conn)


def _may_be_one_rows(exc: BaseException) -> bool:
    """An error one row of the batch may have caused alone: a value, limit or trigger that refuses
    it (DETERMINISTIC_SQLSTATE_CLASSES), a lock wait that ran out (a workflow step's row waits
    at most 1 s) or a deadlock. Anything else (the connection, the pool, the server, a privilege,
    the statement bound) is the write path's, and says nothing about any one row: the whole
    batch is tried again later."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return sqlstate.startswith(DETERMINISTIC_SQLSTATE_CLASSES) or sqlstate in ROW_SQLSTATES

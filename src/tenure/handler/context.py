"""What a handler receives: its job, its lease, and the means to prove progress and to
complete in its own transaction."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from tenure.handler.atomic import run_atomic
from tenure.handler.job_services import JobServices
from tenure.handler.published import run_publish, run_publish_sync
from tenure.handler.sync.atomic import run_atomic_sync
from tenure.handler.sync_transaction import SyncTransaction
from tenure.handler.transaction import AsyncTransaction
from tenure.handler.txn import TransactionPolicy
from tenure.handler.waits import (
    default_wait_name,
    read_step_condition,
    read_step_condition_sync,
    run_wait,
    run_wait_sync,
)
from tenure.model.errors import LeaseLost
from tenure.model.jobs import ClaimedJob
from tenure.model.waits import WaitResult

T = TypeVar("T")


class JobContext:
    """The handler's view of one attempt of one job."""

    def __init__(self, job: ClaimedJob, services: JobServices) -> None:
        #: The claimed job: its queue, task, payload, and lease with its expiry and deadline.
        self.job = job
        self._services = services
        self._lock = threading.Lock()
        self._progress: Any = job.progress
        self._progress_version = 0
        self.lost_reason: str | None = None
        self.completed = False
        #: Set when ctx.atomic committed the completion on the primary but no synchronous standby
        #: is known to have it: why (the worker then reports the job not replicated).
        self.not_replicated: str | None = None
        #: When this worker must take the lease as lost, on the process clock (time.monotonic):
        #: counted from before the claim or its last renewal was sent, so never later than the
        #: database's expiry. The worker sets it; a context outside a worker never expires.
        self.local_expiry = math.inf
        #: The wait this attempt ended in (the job left running for waiting), by name.
        self.waiting_on: str | None = None
        # Made by the first wait: most jobs never wait, and a context is made for every job.
        self._wait_counts: dict[str, int] | None = None

    # -- identity ---------------------------------------------------------------------------

    @property
    def job_id(self) -> int:
        """The job's id, the one enqueue returned."""
        return self.job.id

    @property
    def attempt(self) -> int:
        """1 on the first run, 2 on the first retry, ..."""
        return self.job.attempt

    @property
    def token(self) -> int:
        """The fencing token of this attempt: pass it to stores that reject older tokens."""
        return self.job.lease.token

    @property
    def snoozes(self) -> int:
        """How many times this job has snoozed (tenure.Snooze) before this run."""
        return self.job.snoozes

    @property
    def idempotency_key(self) -> uuid.UUID:
        """Stable across every retry of this job: pass it to payment, e-mail, webhook APIs."""
        return self.job.idempotency_key

    def step_key(self, step: str) -> str:
        """A stable idempotency key for one external step of this job."""
        return str(uuid.uuid5(self.job.idempotency_key, step))

    @property
    def payload(self) -> dict[str, Any]:
        """The payload as stored; `tenure.secret()` references are still references here."""
        return self.job.payload

    @property
    def checkpoint(self) -> Any:
        """The last progress marker recorded for this job, from this attempt or an earlier one."""
        return self._progress

    # -- progress and the lease -------------------------------------------------------------

    def progress(self, marker: Any) -> None:
        """Reports progress: the heartbeat renews the lease only when this marker changes.

        `marker` must be JSON (a cursor, a count of chunks done). Raises LeaseLost once the
        lease is gone, which makes this call the handler's cancellation point.
        """
        self.check()
        with self._lock:
            if marker != self._progress:
                self._progress = marker
                self._progress_version += 1

    def progress_snapshot(self) -> tuple[int, Any]:
        with self._lock:
            return self._progress_version, self._progress

    def check(self) -> None:
        """Raises LeaseLost if this worker no longer holds the job."""
        if self.lost_reason is not None:
            raise LeaseLost(self.job.id, self.token, self.lost_reason)

    def check_in_time(self) -> None:
        """`check`, and LeaseLost past the lease's local expiry too, before the worker's watchdog
        has marked it: the last check before an external call. A busy event loop runs the
        watchdog late, and a newer attempt may by then hold the job and have made the call."""
        self.check()
        if time.monotonic() >= self.local_expiry:
            raise LeaseLost(self.job.id, self.token, "lease expired before it was renewed")

    @property
    def lease_lost(self) -> bool:
        """True once this worker no longer holds the job (`check` raises then)."""
        return self.lost_reason is not None

    def mark_lost(self, reason: str) -> None:
        if self.lost_reason is None:
            self.lost_reason = reason

    # -- external effects ---------------------------------------------------------------

    async def effect(
        self, name: str, *, perform: Callable[[str], Any], reconcile: Callable[..., Any] | None = None
    ) -> Any:
        """Performs an external call at most once across retries, through the effect ledger.

        `perform(key)` makes the call (pass `key` on to the destination if it takes one) and
        returns a JSON outcome. A 'done' effect returns its recorded outcome without calling
        again; an effect an earlier attempt may have performed goes to `reconcile` first
        (see tenure.handler.effects). Without `reconcile` the job fails with EFFECT_UNCERTAIN.
        """
        from tenure.handler.effects import run_effect

        return await run_effect(self, self._services, name, perform, reconcile)

    def effect_sync(
        self, name: str, *, perform: Callable[[str], Any], reconcile: Callable[..., Any] | None = None
    ) -> Any:
        """`effect` for plain-function handlers, which run in worker threads."""
        from tenure.handler.effects import run_effect_sync

        return run_effect_sync(self, self._services, name, perform, reconcile)

    # -- waits: for a signal, or for a time -----------------------------------------------

    async def wait_for(
        self, key: str, *, timeout: float | timedelta | None = None, name: str | None = None
    ) -> WaitResult:
        """Waits for a signal to `key` (`app.signal(key, payload)`), at most `timeout` (seconds or
        a timedelta; None: for as long as it takes), holding no slot and no lease meanwhile.

        A signal already sent to `key` and kept for a waiter is returned at once. Otherwise the
        job leaves running for waiting and this attempt ends here (WaitStarted, which the worker
        handles: do not catch it); the handler runs again from the top when the signal arrives,
        the timeout passes or an operator ends the wait, and this call then returns how it ended:
        `result.signalled` with `result.payload`, `result.timed_out`, or `result.ended`. Work
        before the wait runs again then: keep it repeatable (docs/waits.md). `name` tells this
        wait apart from the job's others (default: the key, `key#2` for the second in a run)."""
        return await run_wait(self, self._services, key, timeout, name)

    def wait_for_sync(
        self, key: str, *, timeout: float | timedelta | None = None, name: str | None = None
    ) -> WaitResult:
        """`wait_for` for plain-function handlers, which run in worker threads."""
        return run_wait_sync(self, self._services, key, timeout, name)

    async def sleep(self, duration: float | timedelta, *, name: str | None = None) -> None:
        """Sleeps `duration` (seconds or a timedelta) holding no slot and no lease: the deadline
        is kept in the database, so a worker's restart does not start the sleep over. As with
        `wait_for`, this attempt ends here and the handler runs again from the top when the
        time has come; the sleep, reached again, then returns at once."""
        await run_wait(self, self._services, None, duration, name)

    def sleep_sync(self, duration: float | timedelta, *, name: str | None = None) -> None:
        """`sleep` for plain-function handlers, which run in worker threads."""
        run_wait_sync(self, self._services, None, duration, name)

    async def publish(self, key: str, value: Any) -> None:
        """Publishes `value` (JSON, at most 64 KiB) under `key` for whoever enqueued this job: on
        its workflow when the job is a step (`app.published(key, workflow_id=...)`), else on the
        job (`job_id=...`). A later publish of the key replaces it. Fenced: raises LeaseLost,
        writing nothing, when this attempt no longer holds the job."""
        await run_publish(self, self._services, key, value)

    def publish_sync(self, key: str, value: Any) -> None:
        """`publish` for plain-function handlers, which run in worker threads."""
        run_publish_sync(self, self._services, key, value)

    async def step_condition(self) -> WaitResult | None:
        """For a workflow step declared with a condition (`wait_for=Signalled(key)`, `Elapsed(...)`):
        how it ended before the step ran, the signal's payload with it; None for a step without
        one, or a job that is no step."""
        return await read_step_condition(self.job_id, self._services)

    def step_condition_sync(self) -> WaitResult | None:
        """`step_condition` for plain-function handlers, which run in worker threads."""
        return read_step_condition_sync(self.job_id, self._services)

    def wait_name(self, key: str | None, name: str | None) -> str:
        """The name of the next wait on `key` (None: a sleep) of this run: `name` when given."""
        if name is not None:
            return name
        if self._wait_counts is None:
            self._wait_counts = {}
        return default_wait_name(self._wait_counts, key)

    def began_wait(self, name: str) -> None:
        """The job has left running for waiting: nothing this attempt writes after it lands."""
        self.waiting_on = name
        self.mark_lost(f"the job is waiting ({name})")

    # -- transactional completion ------------------------------------------------------

    async def atomic(
        self,
        work: Callable[[AsyncTransaction], Awaitable[T]],
        *,
        policy: TransactionPolicy | None = None,
    ) -> T:
        """Runs `work` and this job's fenced completion in ONE transaction.

        If the fence fails (the lease was lost), the transaction, with all of `work`'s writes,
        rolls back and LeaseLost is raised. 40001/40P01 rerun the whole unit, and so does the
        job's row being locked by another session for the moment. Session settings `work`
        changes (SET) are reset inside the transaction, after the completion: through a
        transaction pooler the session is the pooler's to lend out once the transaction ends.
        """
        return await run_atomic(self, self._services, work, policy)

    def atomic_sync(
        self, work: Callable[[SyncTransaction], T], *, policy: TransactionPolicy | None = None
    ) -> T:
        """`atomic` for plain-function handlers, which run in worker threads."""
        return run_atomic_sync(self, self._services, work, policy)

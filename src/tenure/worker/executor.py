"""Runs one claimed job: context, handler, max runtime, outcome."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.queries import FailOutcome
from tenure.handler.context import JobContext
from tenure.model.errors import JobFailure, LeaseLost, Transient, ValidationError
from tenure.model.jobs import ClaimedJob, JobState
from tenure.model.outcomes import ResultRefused, Snooze, encode_result
from tenure.model.registration import register_once
from tenure.model.retry import FailureClass, FailurePolicy, error_code
from tenure.model.secrets import has_secret_refs, redact, resolve_secrets, resolved_values
from tenure.model.waits import WaitStarted
from tenure.tasks import AnyTask, TaskRegistry
from tenure.telemetry.logging_context import bind_job, job_fields
from tenure.telemetry.tracing import record_outcome, run_span
from tenure.worker.completer import Completer, CompletionOutcome, CompletionRejected
from tenure.worker.events import Outcome
from tenure.worker.health import describe_error
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

LOST = "lease lost"
SHUTDOWN = "worker shutting down"
MAX_RUNTIME = "max runtime reached"
#: How long a failure write whose lease ended at the job's deadline keeps being retried.
DEADLINE_WRITE_WINDOW = 5.0
#: Whether a job's task runs its first step as it is made (Python 3.12 and later), rather than at
#: the event loop's next turn (_run_in_task).
EAGER_TASKS = sys.version_info >= (3, 12)

ThreadHook = Callable[[], AbstractContextManager[Any]]
#: Entered around every plain-function handler, in the thread that runs it, by every worker of
#: this process: per-thread resources (a framework's thread-local database connections) can only
#: be put right from the thread that holds them.
_thread_hooks: list[ThreadHook] = []


def around_thread_handlers(hook: ThreadHook) -> Callable[[], None]:
    """Registers `hook`, a context manager factory, to be entered around each plain-function
    handler of every worker in this process, in the handler's own thread: it is entered before the
    handler and exited after it, even when it raises. An error it raises counts as the handler's.
    Registering the same hook again does nothing. Returns a function that removes it."""
    return register_once(_thread_hooks, hook)


def _within_hooks(hooks: tuple[ThreadHook, ...], call: Callable[[], Any]) -> Any:
    with contextlib.ExitStack() as stack:
        for hook in hooks:
            stack.enter_context(hook())
        return call()


@dataclass(slots=True)
class Execution:
    """A job this worker is running, with its lease's expiry as measured on the local clock.

    The execution holds a slot until the job's code has stopped: for a plain-function handler
    that is when its thread returns, which no signal can force (LeaseLost is raised at its next
    `ctx.check()` or `ctx.progress()`), so a lost lease never lets a second job into its thread.
    """

    job: ClaimedJob
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    #: What the task runs (Executor._run_in_task).
    work: Coroutine[Any, Any, None] | None = field(default=None, repr=False)
    thread: asyncio.Future[Any] | None = None
    local_deadline: float = 0.0
    cancel_reason: str | None = None
    handler_done: bool = False
    abandoned: bool = False
    sent_progress_version: int = 0
    started: float = field(default_factory=time.monotonic)
    #: This attempt's tracing span (tenure.telemetry.tracing), when tracing is on.
    span: Any = None
    #: Told when the handler's code has stopped and its slot is free for another job.
    slot_freed: Callable[[], None] = field(default=lambda: None, repr=False)
    #: Its success is with the completer, whose word ends the execution (Executor._completed).
    outcome_pending: bool = False
    #: Its task's work has returned or raised (or the task was cancelled before it began).
    work_done: bool = False
    #: Left `Executor.running`: its outcome is written, or it is given up.
    ended: bool = False
    #: Told once it has ended (tenure.testing waits for a job's outcome with it).
    on_end: Callable[[], None] | None = field(default=None, repr=False)

    def set_expiry(self, expires_at: Any, db_now: Any, sent_at: float) -> None:
        # Only a duration crosses from the database clock to ours, never a wall-clock time,
        # and it is counted from when the request was sent: the reply's travel time only makes
        # the estimate earlier than the database's, never later.
        self.ctx.local_expiry = sent_at + (expires_at - db_now).total_seconds()

    @property
    def local_expiry(self) -> float:
        """When the lease must be taken as lost, on the process clock (the handler's context
        keeps it, so that the handler's own checks see it too)."""
        return self.ctx.local_expiry

    @property
    def code_stopped(self) -> bool:
        """The handler's code is no longer running (its thread, if any, has returned)."""
        if self.thread is not None:
            return self.thread.done()
        return self.task is None or self.task.done() or self.handler_done


class Executor:
    def __init__(
        self,
        services: WorkerServices,
        registry: TaskRegistry,
        completer: Completer,
        threads: ThreadPoolExecutor,
    ) -> None:
        self.services = services
        self.registry = registry
        self.completer = completer
        self.threads = threads
        #: Executions by (job id, token): one job can briefly have two here, when the database
        #: handed it out again while this worker's older attempt had not yet stopped. An execution
        #: stays here until its outcome is written, so its lease is watched until then.
        self.running: dict[tuple[int, int], Execution] = {}
        #: How many of them still run their handler's code: the slots in use. A job whose handler
        #: has returned gives its slot back while its outcome is being written, so the next claim
        #: overlaps that write instead of waiting for it.
        self.busy = 0
        self._latest_token: dict[int, int] = {}

    def start(
        self,
        job: ClaimedJob,
        on_done: Any,
        sent_at: float,
        traced: bool = True,
        on_end: Callable[[], None] | None = None,
    ) -> Execution:
        """Runs `job` in a task of its own; `traced`: a tracer provider may record its span (asked
        once per claim by the caller, not once per job). `on_done` is told when its slot frees,
        `on_end` when it ends, its outcome written (and its place among the completions waiting
        free)."""
        job_id, lease, db_now = job.id, job.lease, job.db_now
        key = (job_id, lease.token)
        running = self.running
        if key in running:
            return self._claimed_again(running[key], job, sent_at)
        execution = Execution(job, JobContext(job, self.services))
        execution.set_expiry(lease.expires_at, db_now, sent_at)
        execution.local_deadline = sent_at + (lease.deadline - db_now).total_seconds()
        older = self._latest_token.get(job_id)
        if older is not None and older != lease.token and (job_id, older) in running:
            # A newer token proves the older lease is gone: stop that attempt now rather than at
            # the watchdog's next tick, so one worker never runs a job twice at once.
            self.lose(running[(job_id, older)], "lease lost: the job was claimed again", "RECLAIMED")
        self._latest_token[job_id] = lease.token
        running[key] = execution
        execution.slot_freed = on_done
        execution.on_end = on_end
        self.busy += 1
        # Untraced, the attempt is the task's whole work and ends the execution itself: a
        # coroutine less for every job than wrapping it in _ending.
        self._run_in_task(
            execution, self._ending(execution, self._run(execution)) if traced else self._attempt(execution)
        )
        return execution

    def _run_in_task(
        self,
        execution: Execution,
        work: Coroutine[Any, Any, None],
        context: contextvars.Context | None = None,
    ) -> None:
        """Runs `work` as the execution's task. `work` ends the execution's work when it returns or
        raises: _attempt does so itself, any other work is wrapped in _ending.

        On Python 3.12 and later the task starts eagerly: its first step runs as it is made, inside
        it (the handler's `asyncio.current_task()` is its own), and a job whose handler returns
        without suspending is done before it would have been scheduled (4.4 us of worker CPU a
        no-op job). That step may end the execution, or lose it, before the task is known here."""
        execution.work_done = False
        execution.work = work
        interrupted = execution.cancel_reason
        loop, name = asyncio.get_running_loop(), f"tenure-job-{execution.job.id}"
        if sys.version_info >= (3, 12):  # EAGER_TASKS, written out for the type checker
            task = asyncio.Task(work, loop=loop, name=name, context=context, eager_start=True)
        else:
            # The loop's own create_task takes the name as it makes the task: asyncio.create_task
            # names it a second time, after the default name (half a microsecond a job).
            task = loop.create_task(work, name=name, context=context)
        execution.task = task
        if execution.cancel_reason != interrupted:
            self._cancel(execution)  # interrupted in its first step, before there was a task to cancel

    async def _ending(self, execution: Execution, work: Coroutine[Any, Any, None]) -> None:
        # The execution's end is run by its own task as `work` returns, not by a done callback:
        # a callback scheduled and run for every job cost about a microsecond of worker CPU a
        # job. A task cancelled before it began never gets here: _cancel covers that one.
        try:
            await work
        finally:
            self._work_done(execution)

    def _work_done(self, execution: Execution) -> None:
        if execution.work_done:
            return
        execution.work_done = True
        if self._release_slot(execution):  # a task cancelled before its handler returned
            execution.slot_freed()
        self._end_if_done(execution)

    def _cancel(self, execution: Execution) -> None:
        """Cancels the execution's task. One cancelled before its first step never runs its
        work, so a done callback ends the execution then (closing the work, never begun)."""
        task = execution.task
        if task is None or task.done():
            return
        task.cancel()
        task.add_done_callback(functools.partial(self._cancelled, execution))

    def _cancelled(self, execution: Execution, _: asyncio.Task[None]) -> None:
        if not execution.work_done:
            if execution.work is not None:
                execution.work.close()
            self._work_done(execution)

    def _end_if_done(self, execution: Execution) -> None:
        """Ends the execution once its work is done and no outcome of its is still being written."""
        if execution.ended or execution.outcome_pending or not execution.work_done:
            return
        execution.ended = True
        job = execution.job
        self.running.pop((job.id, job.lease.token), None)
        if self._latest_token.get(job.id) == job.lease.token:
            del self._latest_token[job.id]
        if execution.on_end is not None:
            execution.on_end()

    def _claimed_again(self, execution: Execution, job: ClaimedJob, sent_at: float) -> Execution:
        """The database handed this worker a lease it already runs: the same job, the same token.
        Only a lost claim does that (a failover to a standby that never received the claim the
        running attempt was started under), and the fence cannot tell two attempts with one
        (owner, token) apart, so a second is never started: the running attempt keeps the new
        lease, or, if it has stopped already, the lease is left to expire and be recovered."""
        ctx = execution.ctx
        keeps = not (ctx.lease_lost or ctx.completed or execution.handler_done)
        if keeps:
            execution.set_expiry(job.lease.expires_at, job.db_now, sent_at)
            execution.local_deadline = sent_at + (job.lease.deadline - job.db_now).total_seconds()
        log.warning(
            "job %s: claimed again under token %s, which this worker already holds: the database "
            "lost the claim it runs under (a failover to a standby that had not received it); %s",
            job.id,
            job.lease.token,
            "the attempt already running keeps the lease"
            if keeps
            else "its attempt has stopped, so the lease is left to expire and be recovered",
            extra=job_fields(job, self.services.owner),
        )
        return execution

    def lose(self, execution: Execution, reason: str, code: str = "LEASE_LOST") -> None:
        """This worker no longer holds the job: stop its queue writes and, if async, the handler.

        The loss is also written to the job's history (best effort, in the background), so the
        stale holder's side of a takeover shows there even when it never got to write anything.
        """
        if execution.ctx.lease_lost:
            return
        execution.ctx.mark_lost(reason)
        job = execution.job
        self.services.stats.leases_lost += 1
        self.services.events.lease_lost(job, reason, code)
        log.warning(
            "job %s: %s (token %s); stopping it",
            job.id,
            reason,
            job.lease.token,
            extra=job_fields(job, self.services.owner),
        )
        self.services.in_background(self._record_loss(job, code, reason))
        self._interrupt(execution, LOST)

    def deadline_reached(self, execution: Execution) -> None:
        """The job ran past its max runtime: stop it and record MAX_RUNTIME for it."""
        if execution.ctx.lease_lost or execution.handler_done or execution.cancel_reason is not None:
            return
        execution.ctx.mark_lost(MAX_RUNTIME)
        self._interrupt(execution, MAX_RUNTIME)

    def stop_for_shutdown(self, execution: Execution) -> None:
        execution.ctx.mark_lost(SHUTDOWN)
        self._interrupt(execution, SHUTDOWN)

    def abandon(self, execution: Execution) -> None:
        """Stops waiting for a thread that will not return (the worker is exiting)."""
        execution.abandoned = True
        self._cancel(execution)

    def _interrupt(self, execution: Execution, reason: str) -> None:
        if execution.cancel_reason is not None or execution.handler_done:
            return
        execution.cancel_reason = reason
        self._cancel(execution)

    async def _record_loss(self, job: ClaimedJob, code: str, reason: str) -> None:
        try:
            async with self.services.connection() as conn:
                await self.services.queries.lease_lost_record(
                    conn,
                    job_id=job.id,
                    token=job.lease.token,
                    owner=self.services.owner,
                    error_code=code,
                    error=reason,
                )
        except Exception as exc:
            log.info("could not record the lease loss of job %s: %s", job.id, type(exc).__name__)

    async def _run(self, execution: Execution) -> None:
        with run_span(execution.job, self.services.owner) as span:
            execution.span = span
            await self._attempt(execution)

    async def _attempt(self, execution: Execution) -> None:
        """Runs the job's handler and settles its outcome, then ends the execution's work (it is
        its task's whole work, or _run's inside a span). A task cancelled before it began never
        gets here: _cancel covers that one."""
        try:
            job, ctx = execution.job, execution.ctx
            bind_job(job, self.services.owner)  # this task's context: every log line names the job
            task = self.registry.get(job.task)
            if task is None:
                await self._fail(
                    execution,
                    None,
                    "UNKNOWN_TASK",
                    f"no task named {job.task!r} is registered in worker {self.services.owner}",
                    FailureClass.TRANSIENT,
                )
                return
            # Arguments only: annotations were checked at enqueue, and a stored job is not failed
            # for a handler's annotation changed since.
            mismatch = task.accepts(job.payload, check_types=False)
            if mismatch:
                await self._fail(
                    execution,
                    task,
                    "BAD_PAYLOAD",
                    f"payload does not fit {job.task}: {mismatch}",
                    FailureClass.PERMANENT,
                )
                return
            payload, secrets = job.payload, []
            if job.secret_refs or (job.secret_refs is None and has_secret_refs(payload)):
                # Resolved values live in this attempt's memory only; every error text Tenure writes
                # for the attempt has them redacted.
                try:
                    payload = await resolve_secrets(payload, self.registry.secret_resolver)
                except JobFailure as exc:
                    await self._fail(execution, task, exc.code, str(exc), FailureClass.PERMANENT)
                    return
                secrets = resolved_values(payload)
            if task.codec is not None:
                # The handler's datetimes, Decimals, dataclasses... from their JSON form.
                try:
                    payload = task.codec.decode(payload)
                except ValidationError as exc:
                    why = f"payload does not fit {job.task}: {exc}"
                    await self._fail(execution, task, "BAD_PAYLOAD", why, FailureClass.PERMANENT)
                    return
            error: Exception | None = None
            value: Any = None
            try:
                if task.is_async:
                    value = await task(ctx, **payload)
                else:
                    call = functools.partial(task, ctx, **payload)
                    if _thread_hooks:
                        call = functools.partial(_within_hooks, tuple(_thread_hooks), call)
                    execution.thread = asyncio.get_running_loop().run_in_executor(self.threads, call)
                    # Shielded: cancelling this task must not forget the thread, which runs on.
                    value = await asyncio.shield(execution.thread)
            except asyncio.CancelledError:
                if execution.cancel_reason is None:
                    raise
            except WaitStarted:
                pass  # the job is waiting: ctx.waiting_on says for what
            except Exception as exc:
                error = exc
            if execution.span is not None:  # traced: no call a job otherwise
                record_outcome(
                    execution.span,
                    execution.cancel_reason or ("raised" if error is not None else "returned"),
                    error,
                )
            if execution.thread is None or execution.thread.done():
                self._code_stopped(execution)
            writing = self._settle(execution, task, error, secrets, value)
            if writing is not None:
                await writing
            if execution.thread is not None:
                await self._until_code_stops(execution)
        finally:
            self._work_done(execution)

    async def _until_code_stops(self, execution: Execution) -> None:
        """Keeps the slot until a thread handler returns, however long it runs on."""
        thread = execution.thread
        while thread is not None and not thread.done():
            try:
                await asyncio.shield(thread)
            except asyncio.CancelledError:
                if execution.abandoned:
                    raise
            except Exception:
                break
        self._code_stopped(execution)

    def _code_stopped(self, execution: Execution) -> None:
        """The handler's code has stopped: its slot is free, though its outcome may still be
        being written (the execution stays in `running` until then)."""
        if self._release_slot(execution):
            execution.slot_freed()

    def _release_slot(self, execution: Execution) -> bool:
        """Marks the handler's code stopped; False when it was already."""
        if execution.handler_done:
            return False
        execution.handler_done = True
        self.busy -= 1
        return True

    def _settle(
        self, execution: Execution, task: AnyTask, error: Exception | None, secrets: list[str], value: Any
    ) -> Coroutine[Any, Any, None] | None:
        """Settles the attempt's outcome, if it is still this worker's to write: `error` raised,
        or `value` returned (a result, or a Snooze). A success is handed to the completer; a
        failure or a snooze is returned as the write to await (a coroutine only for those: the
        success of every job would otherwise make one and await it)."""
        job, ctx = execution.job, execution.ctx
        if ctx.waiting_on is not None:
            # The wait's own statement ended the attempt and wrote its outcome; whatever the
            # handler did after it (caught WaitStarted, raised) cannot land.
            self.services.stats.waited += 1
            self._finished(execution, Outcome.WAITING, None)
            return None
        if execution.cancel_reason == MAX_RUNTIME:
            runtime = (job.lease.deadline - job.db_now).total_seconds()
            return self._fail(
                execution,
                task,
                "MAX_RUNTIME",
                f"ran past its max runtime of {runtime:.1f}s (max_runtime_seconds)",
                FailureClass.TRANSIENT,
                at_deadline=True,
            )
        if execution.cancel_reason is not None:
            return None  # lease lost or shutdown: the job is no longer ours to write
        if isinstance(error, LeaseLost):
            if not ctx.lease_lost:
                self.lose(execution, LOST)
            return None
        snooze = error if isinstance(error, Snooze) else value if isinstance(value, Snooze) else None
        if snooze is not None and not ctx.completed and not ctx.lease_lost:
            return self._snooze(execution, task, snooze)
        if error is not None:
            if ctx.completed or ctx.lease_lost:
                # The type only: an exception's text may quote the payload.
                log.warning("job %s raised %s after its outcome was settled", job.id, type(error).__name__)
                if ctx.completed:
                    self._succeeded(execution)  # committed by ctx.atomic: a success
                return None
            failure = task.policy.failure.classify(error)
            detail = redact("".join(traceback.format_exception(error, limit=8)), secrets)[-1900:]
            return self._fail(execution, task, error_code(error), detail, failure, error)
        result = None
        if value is not None and snooze is None:
            try:
                if task.codec is not None:
                    value = task.codec.encode_result(value)
                result = encode_result(value, self.services.options.max_result_bytes)
            except ResultRefused as refused:
                if ctx.completed:
                    log.warning("job %s succeeded, but its result is not stored: %s", job.id, refused)
                    self._succeeded(execution)
                    return None
                return self._fail(execution, task, refused.code, str(refused), FailureClass.PERMANENT)
        if ctx.completed:
            # Completed in the handler's own transaction; the result follows that commit.
            if result is not None or job.result_wanted:
                self.services.in_background(self._store_result(job, result))
            if ctx.not_replicated is None:
                self._succeeded(execution)
            else:
                self._not_replicated(execution, "its ctx.atomic commit")
            return None
        if ctx.lease_lost:
            return None
        # A waited-for job always gets a result, JSON null for none: a waiter reads SQL NULL as
        # "still on its way" (see job_result_get).
        stored = Jsonb(result) if result is not None or job.result_wanted else None
        # Handed over, not waited for: the task ends here, and the completer's word ends the
        # execution. It is told in the completer's own context, not a copy of this task's: its
        # rare paths name the job in their log lines themselves (_completed).
        execution.outcome_pending = True
        settled = functools.partial(self._completed, execution, task)
        self.completer.complete_soon(job, execution.local_expiry, stored, settled)
        return None

    def _completed(
        self, execution: Execution, task: AnyTask, outcome: str, rejected: CompletionRejected | None
    ) -> None:
        """The completer's word on a success handed to it."""
        execution.outcome_pending = False
        if outcome == CompletionOutcome.DONE:  # the usual word, settled here without a call a step
            self.services.stats.succeeded += 1
            self._finished(execution, Outcome.SUCCEEDED, None)
            self._end_if_done(execution)
            return
        if rejected is not None:
            # The same completion would fail again: the job fails now, with the database's word,
            # in a task of its own that the execution now waits for.
            failing = self._fail(
                execution, task, "COMPLETION_REJECTED", str(rejected), FailureClass.PERMANENT
            )
            context = contextvars.copy_context()  # the completer's: the job is bound in the copy
            context.run(bind_job, execution.job, self.services.owner)
            self._run_in_task(execution, self._ending(execution, failing), context)
            return
        self._record_completion(execution, outcome)
        self._end_if_done(execution)

    def _record_completion(self, execution: Execution, outcome: str) -> None:
        job, ctx = execution.job, execution.ctx
        if outcome == CompletionOutcome.DONE:
            self._succeeded(execution)
        elif outcome == CompletionOutcome.NOT_REPLICATED:
            self._not_replicated(execution, "its completion")
        elif outcome == CompletionOutcome.LOST:
            self.services.stats.fencing_losses += 1
            self.services.events.fencing_loss(job, "FENCED_COMPLETE")
            self._finished(execution, Outcome.FENCED, "FENCED_COMPLETE")
            ctx.mark_lost("fence refused the completion")
            log.warning(
                "job %s: completion refused by the fence (token %s)",
                job.id,
                job.lease.token,
                extra=job_fields(job, self.services.owner),
            )
        else:
            self.lose(execution, "lease ran out before its completion could be written", "WRITE_FAILED")

    async def _store_result(self, job: ClaimedJob, result: Any) -> None:
        try:
            async with self.services.connection() as conn:
                await self.services.queries.job_result_set(
                    conn, job_id=job.id, token=job.lease.token, result=result
                )
        except Exception as exc:  # the job stays succeeded; a waiter finds no result, or polls
            log.warning("could not store the result of job %s: %s", job.id, describe_error(exc))

    async def _snooze(self, execution: Execution, task: AnyTask, snooze: Snooze) -> None:
        """Puts the job back to wait `snooze.delay` seconds without spending its attempt."""
        job, services = execution.job, self.services

        async def write(conn: AsyncConnection[Any], attempt: int) -> FailOutcome:
            return await services.queries.job_snooze(
                conn,
                job_id=job.id,
                owner=services.owner,
                token=job.lease.token,
                delay=snooze.delay,
                max_snoozes=task.policy.max_snoozes,
                reason=snooze.reason,
            )

        result = await self._write_outcome(execution, write, "snooze", execution.local_expiry)
        if result is None:
            return
        if result.outcome == "lost":
            services.stats.fencing_losses += 1
            services.events.fencing_loss(job, "FENCED_SNOOZE")
            self._finished(execution, Outcome.FENCED, "FENCED_SNOOZE")
            execution.ctx.mark_lost("fence refused the snooze")
        elif result.state is JobState.DEAD:
            services.stats.dead += 1
            self._finished(execution, Outcome.DEAD, "SNOOZE_LIMIT")
            log.warning("job %s is dead: it snoozed more than max_snoozes allows", job.id)
        else:
            services.stats.snoozed += 1
            if result.state is JobState.SCHEDULED and result.available_at is not None:
                services.scheduled(result.available_at)
            self._finished(execution, Outcome.SNOOZED, None)

    def _succeeded(self, execution: Execution) -> None:
        self.services.stats.succeeded += 1
        self._finished(execution, Outcome.SUCCEEDED, None)

    def _not_replicated(self, execution: Execution, what: str) -> None:
        """The job succeeded on the primary, and no synchronous standby is known to have it.
        With require_sync_replication that is not reported done: the row stays succeeded under
        this lease's token here, and a standby promoted without it still has the job running
        under that token, which expires and is recovered, so the job runs again there."""
        services, job = self.services, execution.job
        services.stats.not_replicated += 1
        strict = services.require_sync_replication
        if not strict:
            services.stats.succeeded += 1
        self._finished(execution, Outcome.NOT_REPLICATED, None)
        log.warning(
            "job %s succeeded on the primary, but %s is not known to be on a standby: %s",
            job.id,
            what,
            "not reported done (require_sync_replication); it runs again if a standby without it is promoted"
            if strict
            else "a failover now can bring the job back to run again",
            extra=job_fields(job, services.owner),
        )

    async def _fail(
        self,
        execution: Execution,
        task: AnyTask | None,
        code: str,
        detail: str,
        failure: FailureClass,
        exc: BaseException | None = None,
        *,
        at_deadline: bool = False,
    ) -> None:
        job, services = execution.job, self.services
        policy = task.policy if task else None
        failure_policy = policy.failure if policy else FailurePolicy()
        backoff = policy.backoff if policy else services.options.recovery_backoff
        requested = exc.delay if isinstance(exc, Transient) else None
        delay = failure_policy.retry_delay(failure, job.attempt, job.max_attempts, backoff, requested)
        services.stats.failures_by_code[code] += 1
        error = f"[{failure}] {detail}"
        # Worth trying until the lease ends; a failure at the deadline may be written a little
        # after it, until recovery takes the job.
        until = time.monotonic() + DEADLINE_WRITE_WINDOW if at_deadline else execution.local_expiry
        text = [error]

        async def write(conn: AsyncConnection[Any], attempt: int) -> FailOutcome:
            return await services.queries.job_fail(
                conn,
                job_id=job.id,
                owner=services.owner,
                token=job.lease.token,
                error_code=code,
                error=text[0],
                retry_delay=delay,
                at_deadline=at_deadline,
            )

        def unstorable(write_exc: Exception) -> None:
            # Not the connection: something about this write itself. Settle the job with a
            # minimal record rather than leave it running until its lease expires.
            text[0] = f"[{failure}] {code}: the error text could not be stored ({type(write_exc).__name__})"

        result = await self._write_outcome(execution, write, "failure", until, unstorable)
        if result is None:
            return
        if result.outcome == "lost":
            services.stats.fencing_losses += 1
            services.events.fencing_loss(job, "FENCED_FAIL")
            self._finished(execution, Outcome.FENCED, code)
            execution.ctx.mark_lost("fence refused the failure")
            return
        if result.state is JobState.DEAD:
            services.stats.dead += 1
            self._finished(execution, Outcome.DEAD, code)
            log.warning("job %s is dead after attempt %s: %s", job.id, job.attempt, code)
        else:
            services.stats.retried += 1
            if result.state is JobState.SCHEDULED and result.available_at is not None:
                services.scheduled(result.available_at)
            self._finished(execution, Outcome.RETRIED, code)
            log.debug("job %s failed with %s; retry scheduled", job.id, code)

    async def _write_outcome(
        self,
        execution: Execution,
        write: Callable[[AsyncConnection[Any], int], Awaitable[FailOutcome]],
        what: str,
        until: float,
        unstorable: Callable[[Exception], None] | None = None,
    ) -> FailOutcome | None:
        """Runs a fenced outcome write until it is answered (not 'busy') or `until` (local
        monotonic time) passes; None then, with the job given up as lost."""
        services = self.services
        attempt = 0
        while True:
            attempt += 1
            try:
                async with services.connection() as conn:
                    result = await write(conn, attempt)
                if result.outcome != "busy":
                    return result
            except Exception as write_exc:
                services.stats.write_errors += 1
                log.warning(
                    "%s write for job %s failed (attempt %s): %s",
                    what,
                    execution.job.id,
                    attempt,
                    describe_error(write_exc),
                )
                if unstorable is not None and not isinstance(
                    write_exc, psycopg.OperationalError | TimeoutError | OSError
                ):
                    unstorable(write_exc)
            pause = min(2.0, 0.05 * 2**attempt)
            if time.monotonic() + pause >= until:
                self.lose(execution, f"lease ran out before its {what} could be written", "WRITE_FAILED")
                return None
            await asyncio.sleep(pause)

    def _finished(self, execution: Execution, outcome: Outcome, code: str | None) -> None:
        events = self.services.events
        if events.sinks:  # with no subscriber (metrics off), no clock read and no call a job
            events.job_finished(execution.job, outcome, code, time.monotonic() - execution.started)

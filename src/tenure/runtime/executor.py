"""Runs one claimed job: context, handler, max runtime, outcome."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg

from tenure.context import JobContext
from tenure.errors import JobFailure, LeaseLost, Transient
from tenure.jobs import ClaimedJob, JobState
from tenure.logging_context import bind_job, job_fields
from tenure.retry import FailureClass, FailurePolicy, error_code
from tenure.runtime.completer import Completer
from tenure.runtime.events import Outcome
from tenure.runtime.services import WorkerServices
from tenure.secrets import has_secret_refs, redact, resolve_secrets, resolved_values
from tenure.tasks import Task, TaskRegistry

log = logging.getLogger("tenure.worker")

LOST = "lease lost"
SHUTDOWN = "worker shutting down"


@dataclass
class Execution:
    """A job this worker is running, with its lease's expiry as measured on the local clock."""

    job: ClaimedJob
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    local_expiry: float = 0.0
    cancel_reason: str | None = None
    sent_progress_version: int = 0
    started: float = field(default_factory=time.monotonic)

    def set_expiry(self, expires_at: Any, db_now: Any) -> None:
        # Only a duration crosses from the database clock to ours, never a wall-clock time (L2).
        self.local_expiry = time.monotonic() + (expires_at - db_now).total_seconds()


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
        #: handed it out again while this worker's older attempt had not yet stopped.
        self.running: dict[tuple[int, int], Execution] = {}
        self._latest_token: dict[int, int] = {}

    def start(self, job: ClaimedJob, on_done: Any) -> Execution:
        execution = Execution(job, JobContext(job, self.services))
        execution.set_expiry(job.lease.expires_at, job.db_now)
        key = (job.id, job.lease.token)
        older = self._latest_token.get(job.id)
        if older is not None and older != job.lease.token and (job.id, older) in self.running:
            # A newer token proves the older lease is gone: stop that attempt now rather than at
            # the watchdog's next tick, so one worker never runs a job twice at once.
            self.lose(self.running[(job.id, older)], "lease lost: the job was claimed again")
        self._latest_token[job.id] = job.lease.token
        self.running[key] = execution
        execution.task = asyncio.create_task(self._run(execution), name=f"tenure-job-{job.id}")

        def finished(_: asyncio.Task[None]) -> None:
            self.running.pop(key, None)
            if self._latest_token.get(job.id) == job.lease.token:
                del self._latest_token[job.id]
            on_done()

        execution.task.add_done_callback(finished)
        return execution

    def lose(self, execution: Execution, reason: str) -> None:
        """This worker no longer holds the job: stop its queue writes and, if async, the handler."""
        if execution.ctx.lease_lost:
            return
        execution.ctx.mark_lost(reason)
        self.services.stats.leases_lost += 1
        self.services.events.lease_lost(execution.job, reason)
        log.warning(
            "job %s: %s (token %s); stopping it",
            execution.job.id,
            reason,
            execution.job.lease.token,
            extra=job_fields(execution.job, self.services.owner),
        )
        if execution.task is not None and execution.cancel_reason is None:
            execution.cancel_reason = LOST
            execution.task.cancel()

    async def _run(self, execution: Execution) -> None:
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
        mismatch = task.accepts(job.payload)
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
        if has_secret_refs(payload):
            # Resolved values live in this attempt's memory only; every error text Tenure writes
            # for the attempt has them redacted (E4).
            try:
                payload = await resolve_secrets(payload, self.registry.secret_resolver)
            except JobFailure as exc:
                await self._fail(execution, task, exc.code, str(exc), FailureClass.PERMANENT)
                return
            secrets = resolved_values(payload)
        runtime_left = (job.lease.deadline - job.db_now).total_seconds()
        try:
            async with asyncio.timeout(runtime_left):
                if task.is_async:
                    await task(ctx, **payload)
                else:
                    call = functools.partial(task, ctx, **payload)
                    await asyncio.get_running_loop().run_in_executor(self.threads, call)
        except asyncio.CancelledError:
            if execution.cancel_reason is None:
                raise
            return  # lease lost or shutdown: the job is no longer ours to write
        except TimeoutError as exc:
            if ctx.lease_lost:
                return
            await self._fail(
                execution,
                task,
                "MAX_RUNTIME",
                f"ran past its max runtime of {runtime_left:.1f}s",
                FailureClass.TRANSIENT,
                exc,
            )
            return
        except LeaseLost:
            if not ctx.lease_lost:
                self.lose(execution, LOST)
            return
        except Exception as exc:
            if ctx.completed or ctx.lease_lost:
                # The type only: an exception's text may quote the payload.
                log.warning("job %s raised %s after its outcome was settled", job.id, type(exc).__name__)
                if ctx.completed:
                    self._succeeded(execution)  # committed by ctx.atomic: a success
                return
            failure = task.policy.failure.classify(exc)
            detail = redact("".join(traceback.format_exception(exc, limit=8)), secrets)[-1900:]
            await self._fail(execution, task, error_code(exc), detail, failure, exc)
            return
        if ctx.completed:
            self._succeeded(execution)  # completed in the handler's own transaction (E3)
            return
        if ctx.lease_lost:
            return
        if await self.completer.complete(job):
            self._succeeded(execution)
        else:
            self.services.stats.fencing_losses += 1
            self.services.events.fencing_loss(job, "FENCED_COMPLETE")
            self._finished(execution, Outcome.FENCED, "FENCED_COMPLETE")
            ctx.mark_lost("fence refused the completion")
            log.warning("job %s: completion refused by the fence (token %s)", job.id, job.lease.token)

    def _succeeded(self, execution: Execution) -> None:
        self.services.stats.succeeded += 1
        self._finished(execution, Outcome.SUCCEEDED, None)

    async def _fail(
        self,
        execution: Execution,
        task: Task | None,
        code: str,
        detail: str,
        failure: FailureClass,
        exc: BaseException | None = None,
    ) -> None:
        job, services = execution.job, self.services
        policy = task.policy if task else None
        failure_policy = policy.failure if policy else FailurePolicy()
        backoff = policy.backoff if policy else services.options.recovery_backoff
        requested = exc.delay if isinstance(exc, Transient) else None
        delay = failure_policy.retry_delay(failure, job.attempt, job.max_attempts, backoff, requested)
        services.stats.failures_by_code[code] += 1
        outcome = None
        for attempt in range(1, 6):
            try:
                async with services.pool.connection() as conn:
                    outcome = await services.queries.job_fail(
                        conn,
                        job_id=job.id,
                        owner=services.owner,
                        token=job.lease.token,
                        error_code=code,
                        error=f"[{failure}] {detail}",
                        retry_delay=delay,
                    )
                break
            except psycopg.OperationalError as write_exc:
                services.stats.write_errors += 1
                log.warning("failure write for job %s failed (attempt %s): %s", job.id, attempt, write_exc)
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        if outcome is None:
            services.stats.fencing_losses += 1
            services.events.fencing_loss(job, "FENCED_FAIL")
            self._finished(execution, Outcome.FENCED, code)
            execution.ctx.mark_lost("fence refused the failure")
            return
        if outcome.state.value == "dead":
            services.stats.dead += 1
            self._finished(execution, Outcome.DEAD, code)
            log.warning("job %s is dead after attempt %s: %s", job.id, job.attempt, code)
        else:
            services.stats.retried += 1
            if outcome.state is JobState.SCHEDULED:
                services.scheduled(outcome.available_at)
            self._finished(execution, Outcome.RETRIED, code)
            log.debug("job %s failed with %s; retry scheduled", job.id, code)

    def _finished(self, execution: Execution, outcome: Outcome, code: str | None) -> None:
        self.services.events.job_finished(execution.job, outcome, code, time.monotonic() - execution.started)

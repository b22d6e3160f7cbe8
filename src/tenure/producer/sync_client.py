# Generated from src/tenure/producer/client.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Enqueueing, inspecting and controlling jobs from application code: `Client`, written once,
async; tools/async_to_sync.py writes its blocking twin, `SyncClient` (tenure.producer.sync_client).

Both validate every job before writing anything. Pass `conn=` to enqueue inside your own
transaction: the job then exists only if your transaction commits, and listeners are woken
only after it does (NOTIFY is delivered at commit).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Unpack

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from tenure.db.connect import DSN_ENV, resolve_dsn
from tenure.db.control_rows import CancelFilter
from tenure.db.replication import sync_required
from tenure.db.sqlfiles import named_queries
from tenure.db.sync.control_queries import ControlQueries
from tenure.db.sync.pool import open_pool
from tenure.db.sync.producer_queries import ProducerQueries
from tenure.db.sync.published_queries import PublishedQueries
from tenure.db.sync.replication_queries import ReplicationQueries
from tenure.db.sync.wait_queries import WaitQueries
from tenure.db.sync.workflow_queries import WorkflowQueries
from tenure.db.wakeups import Admitted, NotifyLimiter, Wakeups, owns_commit
from tenure.model.actor import default_actor
from tenure.model.errors import ValidationError
from tenure.model.jobs import EnqueuedJob, Job, JobEvent, JobSpec
from tenure.model.secrets import CredentialPolicy
from tenure.model.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_queue, check_schema_name
from tenure.model.waits import (
    DEFAULT_SIGNAL_KEEP,
    MAX_SIGNAL_KEEP,
    Published,
    SignalSent,
    Waiting,
    WaitRecord,
    bounded_json,
    check_idempotency_key,
    check_published_key,
    check_signal_key,
    seconds_of,
)
from tenure.model.workflows import (
    EnqueuedWorkflow,
    WorkflowCancel,
    WorkflowStep,
    WorkflowSummary,
    finished_workflow,
)
from tenure.producer.builder import COPY_TYPES, CopyRows, JobBuilder
from tenure.producer.client_support import (
    MISSING_SCHEMA,
    OPEN_TRANSACTIONS,
    connection_error,
    listen_dsn,
    log_lost_wakeup,
    not_migrated,
)
from tenure.producer.control import (
    DEFAULT_MAX_JOBS,
    CancelReport,
    QueuePause,
    cancel_report,
    check_attempts,
    check_cancel,
    check_ids,
    check_reason,
    key_held,
    not_paused,
    pause_until,
    queue_pause,
    retry_report,
    unknown_queue,
)
from tenure.producer.sync.result_wait import wait_for_published, wait_for_result
from tenure.producer.workflow import Workflow, stored_steps
from tenure.tasks import AnyTask, EnqueueOptions, TaskRegistry
from tenure.telemetry.tracing import enqueue_span

POOL_NAME = "tenure-sync"


class SyncClient:
    """The producer's API (enqueue, inspect, control) over a pool: its own, opened on first use,
    or one it is given. `Client` is async; `SyncClient`, generated from it, blocks."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "tenure",
        pool: ConnectionPool[Any] | None = None,
        registry: TaskRegistry | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        credential_policy: CredentialPolicy | str = CredentialPolicy.WARN,
        require_sync_replication: bool | None = None,
    ) -> None:
        """`require_sync_replication`: acknowledge an enqueue only once a synchronous standby has
        it (None: $TENURE_REQUIRE_SYNC_REPLICATION). Without a synchronous standby the enqueue
        raises NoSynchronousStandby and writes nothing; a commit no standby confirmed raises
        NotReplicated. Either way an enqueue whose commit PostgreSQL says may not be replicated
        raises NotReplicated, with the ids of the jobs committed on the primary."""
        self.schema = check_schema_name(schema)
        self.require_sync_replication = sync_required(require_sync_replication)
        self.replication = ReplicationQueries(schema)
        self.queries = ProducerQueries(schema)
        self.control = ControlQueries(schema)
        self.workflows = WorkflowQueries(schema)
        self.published_values = PublishedQueries(schema)
        self.waits = WaitQueries(schema)
        self.builder = JobBuilder(registry, max_payload_bytes, credential_policy)
        self._dsn = dsn
        self._pool = pool
        self._owns_pool = pool is None
        self._notify_limiter = NotifyLimiter()
        # Threads of a web server may all make their first enqueue at once: one pool for all.
        self._opening = threading.Lock()

    def pool(self) -> ConnectionPool[Any]:
        """The client's pool: the one it was given, else its own, opened on first use."""
        if self._pool is None:
            with self._opening:
                if self._pool is None:
                    self._pool = open_pool(resolve_dsn(self._dsn).dsn, min_size=1, max_size=4, name=POOL_NAME)
        return self._pool

    @property
    def dsn(self) -> str | None:
        """The DSN this client connects with: its own, else $TENURE_DSN; None for the embedded server."""
        return self._dsn or os.environ.get(DSN_ENV)

    def close(self) -> None:
        """Closes the client's own pool (a pool it was given stays open), once the wake-ups of
        its last enqueues are sent."""
        if self._pool is not None and self._owns_pool:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _conn(self, conn: Connection[Any] | None) -> Iterator[Connection[Any]]:
        try:
            if conn is not None:
                yield conn
            else:
                with (self.pool()).connection() as pooled:
                    yield pooled
        except MISSING_SCHEMA:
            raise not_migrated(self.schema) from None
        except psycopg.Error as exc:
            mapped = connection_error(self._dsn or "", exc)
            if mapped is None:
                raise
            raise mapped from exc

    def _joined(
        self, conn: Connection[Any] | None
    ) -> contextlib.AbstractContextManager[Connection[Any] | None]:
        """`conn`; else, for the blocking client, the connection of a transaction a registered
        provider says this enqueue joins (client_support.join_open_transactions); else None,
        the pool. A null context when there is nothing to join: a generator's context costs a
        dozen calls an enqueue."""
        if conn is None and OPEN_TRANSACTIONS:
            return self._open_transaction()
        return contextlib.nullcontext(conn)

    @contextlib.contextmanager
    def _open_transaction(self) -> Iterator[Connection[Any] | None]:
        """The blocking client's: the connection of the first open transaction a registered
        provider names, else None."""
        with contextlib.ExitStack() as stack:
            for provider in list(OPEN_TRANSACTIONS):
                joined = stack.enter_context(provider(self))
                if joined is not None:
                    yield joined
                    return
            yield None

    def enqueue(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        conn: Connection[Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueuedJob:
        """Enqueues one job; with `conn`, inside that connection's current transaction.

        Options left out come from the task's policy; see JobBuilder for names it does not know.
        Raises NotReplicated when PostgreSQL says the commit may not be on a standby
        (docs/guarantees.md, "Across a failover"): the job is committed on the primary.
        """
        spec, payload_text = self.builder.spec_json(task, payload, **options)
        return (self._insert([spec], conn, payload_text))[0]

    def enqueue_many(
        self, specs: Iterable[JobSpec], *, conn: Connection[Any] | None = None
    ) -> list[EnqueuedJob]:
        """Enqueues many jobs in one statement, all or none, each checked like `enqueue`'s."""
        checked = [self.builder.check_json(s) for s in specs]
        lone_text = checked[0][1] if len(checked) == 1 else None  # a lone job sends its text as checked
        return self._insert([spec for spec, _ in checked], conn, lone_text)

    def _insert(
        self, checked: list[JobSpec], conn: Connection[Any] | None, payload_text: str | None = None
    ) -> list[EnqueuedJob]:
        """Stores checked jobs; `payload_text`: a lone job's payload as its checks encoded it."""
        if not checked:
            return []
        with enqueue_span(checked) as traced:
            with self._joined(conn) as joined, self._conn(joined) as c:
                # Inside the caller's transaction the insert notifies, delivered at its commit;
                # a commit of the enqueue's own notifies after it (tenure.db.wakeups), unless it
                # is a lone job the limiter admits now: that one notifies in its own commit.
                own = owns_commit(c)
                inline = self._admit_inline(traced) if own else None
                wakeups = Wakeups() if own and inline is None else None
                with self.replication.acknowledged(c, strict=self.require_sync_replication) as ack:
                    if len(traced) == 1:
                        # A lone job the limiter admits now may go to an idle worker's offer.
                        jobs = self.queries.job_insert_many(
                            c, traced, wakeups=wakeups, payload_text=payload_text, hand_off=inline is not None
                        )
                    else:
                        with c.transaction():  # several statements when keyed jobs are among them
                            jobs = self.queries.job_insert_many(c, traced, wakeups=wakeups)
                    ack.job_ids = [j.id for j in jobs]
                if inline is not None and not jobs[0].handed:
                    # Committed, so delivered. A handed job notified its worker, not its queue:
                    # the next job is not left without a wake-up for it.
                    self._notify_limiter.sent(inline)
                self._wake(c, wakeups)
            # After the wake-up: the jobs are committed on this primary, and run if it stays one.
            ack.raise_if_not_replicated()
            return jobs

    def _admit_inline(self, checked: list[JobSpec]) -> Admitted | None:
        """What a lone job due now, committed on its own, notifies inside that commit: its queue,
        when it is at rest for this client (NotifyLimiter.admit_at_rest). The notification
        then reaches the workers at the commit instead of a round trip after it (the idle
        enqueue's latency). Such a commit holds PostgreSQL's notify lock through its WAL flush, so
        a queue under load is notified after its commits instead (tenure.db.wakeups)."""
        if len(checked) != 1:
            return None
        spec = checked[0]
        if spec.run_at is not None or spec.delay:
            return None  # may go in scheduled: its hint names its run time, after the commit
        return self._notify_limiter.admit_at_rest(spec.queue or "default")

    def _wake(self, conn: Connection[Any] | None, wakeups: Wakeups | None) -> None:
        """Notifies for committed jobs, as far as the limiter admits (tenure.db.wakeups).

        The async client sends them in the background on a connection of its pool: the enqueue
        is done once its jobs are committed, and a failure or a cancellation of this hint (the
        caller's own timeout) must not report stored jobs as failed, which would invite
        enqueueing them again. The blocking client sends them on `conn`, which committed them.
        """
        if not wakeups:
            return
        admitted = self._notify_limiter.admit(wakeups)
        if not admitted.wakeups:
            return
        assert conn is not None
        try:
            self.queries.notify_wakeups(conn, admitted.wakeups, after_commit=True)
        except psycopg.Error as exc:
            log_lost_wakeup(exc)  # workers find the jobs at their next poll
            return
        self._notify_limiter.sent(admitted)

    def enqueue_copy(self, specs: Iterable[JobSpec]) -> int:
        """Bulk enqueue through COPY, in one transaction: all or none. A job that fails its
        checks raises, and the transaction writes nothing."""
        specs = list(specs)
        if not specs:
            return 0
        sql = named_queries(self.schema)
        with self._joined(None) as joined, self._conn(joined) as c:
            if not self.queries.may_insert(c):
                # A role that may not write jobs (the producer role) enqueues through the
                # database's enqueue() only: the same jobs, all or none, without COPY's speed.
                return len(self.enqueue_many(specs, conn=c))
            after_commit = owns_commit(c)
            with c.transaction():
                row = (c.execute(sql["clock_now"].encode())).fetchone()
                assert row is not None
                with c.cursor() as cur, cur.copy(sql["job_copy_in"].encode()) as copy:
                    copy.set_types(COPY_TYPES)
                    rows = CopyRows(self.builder, specs, row[0])
                    for values in rows:
                        copy.write_row(values)
                if not after_commit:
                    self.queries.notify_wakeups(c, rows.wakeups, after_commit=False)
            self._wake(c, rows.wakeups if after_commit else None)
        return len(specs)

    def get_job(self, job_id: int) -> Job | None:
        """The job as stored now, or None when there is no job with that id."""
        with self._conn(None) as c:
            return self.queries.job_get(c, job_id)

    def find_jobs(
        self,
        task: str | AnyTask | None = None,
        *,
        queue: str | None = None,
        states: Sequence[str] = ("scheduled", "pending"),
        contains: dict[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[Job]:
        """Jobs of `task` (any, when None) on `queue` in `states` (waiting ones by default) whose
        payload contains `contains` (jsonb @>), oldest first."""
        names = None if task is None else [task if isinstance(task, str) else task.name]
        with self._conn(None) as c:
            return self.queries.jobs_matching(
                c, tasks=names, queue=queue, states=states, contains=contains, limit=limit
            )

    def job_history(self, job_id: int) -> list[JobEvent]:
        """The job's audit events (retries, expiries, dead, reprocess, ...), oldest first."""
        with self._conn(None) as c:
            return self.queries.job_events_list(c, job_id)

    # -- job control ----------------------------------------------------------------

    def cancel(
        self,
        ids: Sequence[int] | None = None,
        *,
        reason: str,
        queue: str | None = None,
        task: str | None = None,
        contains: dict[str, Any] | None = None,
        older_than: float | None = None,
        running: bool = False,
        requeue: bool = False,
        max_jobs: int | None = DEFAULT_MAX_JOBS,
        actor: str | None = None,
    ) -> CancelReport:
        """Cancels jobs by id, or by filter (waiting jobs; with `running`, running ones too).

        A running job is revoked: its lease ends in the database at once and its token moves on,
        so nothing its holder writes afterwards lands (completion, failure, progress, effects,
        ctx.atomic). With `requeue`, a running job goes back to pending instead, to run again at
        once elsewhere. All or nothing: a finished or unknown id, or more than `max_jobs`
        matches, raises and changes nothing.
        """
        where = CancelFilter(queue, task, contains, older_than, running)
        checked, bound = check_cancel(ids, where, requeue=requeue, max_jobs=max_jobs)
        text = check_reason(reason, "cancel")
        with self._conn(None) as c:
            rows = self.control.cancel_many(
                c,
                checked,
                where,
                requeue=requeue,
                max_jobs=bound,
                actor=actor or default_actor(),
                reason=text,
            )
        return cancel_report(rows, requeue=requeue, max_jobs=bound, by_filter=checked is None)

    def retry(
        self, ids: Sequence[int], *, reason: str, attempts: int = 1, actor: str | None = None
    ) -> list[int]:
        """Runs scheduled or pending jobs now, and reprocesses dead or cancelled ones with
        `attempts` more attempts; all or nothing."""
        checked = check_ids(ids)
        if not checked:
            raise ValidationError("name the jobs to retry")
        check_attempts(attempts)
        text = check_reason(reason, "retry")
        with self._conn(None) as c:
            try:
                rows = self.control.retry_many(
                    c, checked, attempts=attempts, actor=actor or default_actor(), reason=text
                )
            except psycopg.errors.UniqueViolation as exc:
                raise key_held(exc, "retried") from None
        return retry_report(rows)

    # -- workflows ------------------------------------------------------------------

    def signal(
        self,
        key: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        keep: float | timedelta | None = None,
        conn: Connection[Any] | None = None,
        actor: str | None = None,
        reason: str | None = None,
    ) -> SignalSent:
        """Sends a signal to `key`: the job waiting longest for it (`ctx.wait_for(key)`) runs again
        with `payload` (JSON, at most 64 KiB); with none waiting, the signal is kept for the next
        waiter for `keep` (seconds or a timedelta; 7 days by default, at most 90), then dropped and
        counted. One signal wakes one waiter. With `conn`, inside that connection's transaction:
        a signal rolled back was never sent. A second signal to the key with the same
        `idempotency_key`, while the first is kept, writes nothing ('duplicate'). `actor` is kept as
        its sender (the database role by default), and `reason` in the history of a job it wakes
        at once."""
        checked = check_signal_key(key)
        text = bounded_json(payload)
        idempotency = check_idempotency_key(idempotency_key)
        seconds = seconds_of(
            DEFAULT_SIGNAL_KEEP if keep is None else keep,
            "a signal's keeping time",
            MAX_SIGNAL_KEEP,
            optional=False,
        )
        assert seconds is not None
        with self._joined(conn) as joined, self._conn(joined) as c:
            return self.waits.signal(
                c,
                key=checked,
                payload_json=text,
                idempotency_key=idempotency,
                keep_seconds=seconds,
                sender=actor,
                note=reason,
            )

    def end_wait(self, job_id: int, *, reason: str, actor: str | None = None) -> str:
        """Ends job `job_id`'s wait: it runs again at once, and its wait returns `ended`. Returns
        the wait's name; raises ValidationError, changing nothing, when the job does not wait."""
        text = check_reason(reason, "end a wait")
        with self._conn(None) as c:
            name = self.waits.end_wait(c, job_id=job_id, actor=actor or default_actor(), reason=text)
        if name is None:
            raise ValidationError(
                f"job {job_id} is not waiting for a signal or a time: nothing to end "
                "(`tenure waits list` shows the jobs that are)"
            )
        return name

    def list_waiting(self, *, queue: str | None = None, limit: int = 100) -> list[Waiting]:
        """Jobs waiting now for a signal or a time, longest first."""
        with self._conn(None) as c:
            return self.waits.waiting(c, queue=queue, limit=limit)

    def job_waits(self, job_id: int) -> list[WaitRecord]:
        """Every wait job `job_id` began, oldest first: what for, and how it ended."""
        with self._conn(None) as c:
            return self.waits.waits_of(c, job_id)

    def enqueue_workflow(
        self, workflow: Workflow, *, conn: Connection[Any] | None = None
    ) -> EnqueuedWorkflow:
        """Enqueues a workflow (tenure.Workflow, chain, fan_in); with `conn`, inside that
        connection's current transaction, like a job. Every step is checked as a job of its task
        before anything is written; the steps without dependencies are jobs at once."""
        steps = stored_steps(workflow, self.builder)
        with self._joined(conn) as joined, self._conn(joined) as c:
            try:
                return self.workflows.enqueue(c, name=workflow.name, on_dead=workflow.on_dead, steps=steps)
            except psycopg.errors.UndefinedFunction:
                raise not_migrated(self.schema, "workflows") from None

    def list_workflows(self, *, limit: int = 50) -> list[WorkflowSummary]:
        """The latest workflows, newest first, with their steps counted by state."""
        with self._conn(None) as c:
            return self.workflows.latest(c, limit=limit)

    def get_workflow(self, workflow_id: int) -> WorkflowSummary | None:
        """The workflow with its steps counted by state; None when there is none with that id."""
        with self._conn(None) as c:
            return self.workflows.get(c, workflow_id)

    def workflow_steps(self, workflow_id: int, *, limit: int = 1000) -> list[WorkflowStep]:
        """The workflow's steps in the order they were declared, with what each waits for."""
        with self._conn(None) as c:
            return self.workflows.steps(c, workflow_id, limit=limit)

    def cancel_workflow(self, workflow_id: int, *, reason: str, actor: str | None = None) -> WorkflowCancel:
        """Cancels every step still to run: waiting and held steps, queued step jobs, and running
        ones revoked (their holders can write nothing more). Steps already finished stay as they
        are. A workflow cancelled before answers 'already'. A finished workflow (every step
        succeeded, dead or cancelled) is refused with ValidationError, and nothing changes."""
        text = check_reason(reason, "cancel a workflow")
        with self._conn(None) as c:
            done = self.workflows.cancel(c, workflow_id, actor=actor or default_actor(), reason=text)
            finished = done is not None and done.outcome == "finished"
            summary = self.workflows.get(c, workflow_id) if finished else None
        if done is None:
            raise ValidationError(f"there is no workflow {workflow_id}: `tenure workflows list` shows them")
        if summary is not None:
            raise ValidationError(finished_workflow(summary))
        return done

    def retry_workflow(
        self, workflow_id: int, *, reason: str, attempts: int = 1, actor: str | None = None
    ) -> list[int]:
        """Reprocesses the workflow's dead steps (and steps whose job was cancelled on its own)
        with `attempts` more attempts: the steps they held wait again, and run once they succeed.
        A step whose job was purged since (`tenure dead purge`, retention) gets its job again,
        made from the step as its release made it. Returns the step jobs reprocessed or remade.
        Raises ValidationError, naming the steps and why, when the only steps left unfinished are
        held for a reason no retry mends (an input over its bound)."""
        check_attempts(attempts)
        text = check_reason(reason, "retry a workflow")
        with self._conn(None) as c:
            summary = self.workflows.get(c, workflow_id)
            if summary is None:
                raise ValidationError(
                    f"there is no workflow {workflow_id}: `tenure workflows list` shows them"
                )
            if summary.cancelled_at is not None:
                raise ValidationError(
                    f"workflow {workflow_id} was cancelled; a cancelled workflow stays cancelled"
                )
            # A dead step whose job was purged since is made again from its step's row first.
            rebuilt = self.workflows.rebuild_purged(c, workflow_id)
            failed = self.workflows.failed_jobs(c, workflow_id)
            if not failed:
                if not rebuilt:
                    held = self.workflows.held_reasons(c, workflow_id)
                    if held:
                        raise ValidationError(
                            f"workflow {workflow_id} has nothing a retry can mend: "
                            + "; ".join(f"step {name!r} is held, {why}" for name, why in held.items())
                        )
                return rebuilt
            rows = self.control.retry_many(
                c, failed, attempts=attempts, actor=actor or default_actor(), reason=text
            )
        return rebuilt + retry_report(rows)

    def pause_queue(
        self,
        queue: str,
        *,
        reason: str,
        until: datetime | timedelta | float | None = None,
        allow_unknown: bool = False,
        actor: str | None = None,
    ) -> QueuePause:
        """Stops every worker claiming from `queue` (running jobs finish), until `until` (a time,
        or a duration from now) or until resumed. Durable: it outlives every worker."""
        check_queue(queue)
        text = check_reason(reason, "pause a queue")
        with self._conn(None) as c:
            at = pause_until(until, self.control.db_now(c))
            row = self.control.pause(
                c, queue, until=at, actor=actor or default_actor(), reason=text, allow_unknown=allow_unknown
            )
        if not row.known or row.paused_at is None:
            raise unknown_queue(queue)
        return QueuePause(queue, row.paused_at, row.until, actor or default_actor(), text)

    def resume_queue(self, queue: str, *, reason: str | None = None, actor: str | None = None) -> None:
        """Ends `queue`'s pause; its workers are woken at once."""
        check_queue(queue)
        with self._conn(None) as c:
            row = self.control.resume(c, queue, actor=actor or default_actor(), reason=reason)
        if row is None or not row.was_in_effect:
            raise not_paused(queue)

    def paused_queues(self) -> list[QueuePause]:
        """The pauses in effect."""
        with self._conn(None) as c:
            return [queue_pause(r) for r in self.control.pauses(c)]

    def published(
        self,
        key: str,
        *,
        workflow_id: int | None = None,
        job_id: int | None = None,
        timeout: float | None = 0.0,
        poll: float = 1.0,
    ) -> Published | None:
        """The value a running step of workflow `workflow_id` (or job `job_id`, which is no step)
        published under `key` with `ctx.publish`, waiting up to `timeout` seconds (None: for
        ever; 0, the default: look once) for it to be published; None when none was. Woken at
        once by the publish where the client can LISTEN, else read every `poll` seconds."""
        if (workflow_id is None) == (job_id is None):
            raise ValidationError(
                "published() reads a workflow's value or a job's: give workflow_id= or job_id=, one of them"
            )
        checked = check_published_key(key)

        @contextlib.contextmanager
        def connection() -> Iterator[Connection[Any]]:
            with self._conn(None) as c:
                yield c

        pool = self.pool()
        return wait_for_published(
            self.published_values,
            connection,
            checked,
            workflow_id=workflow_id,
            job_id=job_id,
            timeout=timeout,
            poll=poll,
            listen_dsn=listen_dsn(pool),
        )

    def workflow_published(self, workflow_id: int) -> list[Published]:
        """Every value the steps of workflow `workflow_id` published, by key."""
        with self._conn(None) as c:
            return self.published_values.of_workflow(c, workflow_id)

    def result(self, job_id: int, *, timeout: float | None = None, poll: float = 1.0) -> Any:
        """Waits for the job and returns its result (its handler's return value; None if it
        returned nothing), typed by the handler's return annotation when this client's registry
        knows the task (a `-> Decimal` handler's result is a Decimal). Raises JobFailed when it
        ends dead or cancelled, ResultTimeout after
        `timeout` seconds. Enqueue with result_wanted=True to be woken the moment it finishes;
        other jobs are read every `poll` seconds."""

        @contextlib.contextmanager
        def connection() -> Iterator[Connection[Any]]:
            with self._conn(None) as c:
                yield c

        pool = self.pool()
        return wait_for_result(
            self.control,
            connection,
            job_id,
            timeout=timeout,
            poll=poll,
            listen_dsn=listen_dsn(pool),
            registry=self.builder.registry,
        )

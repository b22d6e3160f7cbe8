"""Enqueueing and inspecting jobs, async (`Client`) and blocking (`SyncClient`).

Both validate every job before writing anything. Pass `conn=` to enqueue inside your own
transaction: the job then exists only if your transaction commits, and listeners are woken
only after it does (NOTIFY is delivered at commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Unpack

import psycopg
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from tenure.control import (
    DEFAULT_MAX_JOBS,
    CancelReport,
    QueuePause,
    cancel_report,
    check_attempts,
    check_cancel,
    check_ids,
    check_reason,
    default_actor,
    key_held,
    not_paused,
    pause_until,
    queue_pause,
    retry_report,
    unknown_queue,
)
from tenure.db._sqlfiles import named_queries
from tenure.db.connect import (
    DSN_ENV,
    LISTEN_DSN_ENV,
    application_name,
    check_before_pool_sync,
    connection_lost,
    is_connection_lost,
    open_pool,
    prepare_threshold,
    resolve_dsn,
    unavailable,
)
from tenure.db.control_queries import CancelFilter, ControlQueries
from tenure.db.migrate_hint import migrate_hint
from tenure.db.queries import Queries
from tenure.db.wakeups import Admitted, NotifyLimiter, Wakeups, owns_commit
from tenure.errors import DatabaseUnavailable, SchemaNotMigrated, UnknownTask, ValidationError
from tenure.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    EnqueuedJob,
    Job,
    JobEvent,
    JobSpec,
    JobState,
)
from tenure.results import wait_for_result, wait_for_result_sync
from tenure.secrets import CredentialPolicy, check_credentials, credential_policy_from
from tenure.tasks import AnyTask, EnqueueOptions, Task, TaskRegistry
from tenure.tracing import enqueue_span
from tenure.unique import unique_from
from tenure.validation import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_queue,
    check_schema_name,
    check_spec_json,
)

log = logging.getLogger("tenure.client")

# The state goes as text: in COPY's binary format an enum value is its label's bytes.
#: The payload goes as jsonb's binary form, prepared by hand (see _CopyRows): to psycopg, bytes.
_COPY_TYPES = ["text", "text", "bytea", "int2", "timestamptz", "text", "int4", "bool"]
JSONB_BINARY_VERSION = b"\x01"
_MISSING_SCHEMA = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedObject,
)

#: Given a SyncClient, yields the connection whose open transaction a blocking enqueue without
#: `conn` must join, or None when there is none (the client's pool then commits the job at once);
#: raises rather than let the job commit on its own while such a transaction is open.
OpenTransaction = Callable[["SyncClient"], AbstractContextManager["Connection[Any] | None"]]
#: Frameworks whose transactions are opened out of Tenure's sight register one here (the Django
#: contrib: a view's atomic() block), so a plain `task.enqueue_sync(...)` is not a dual write.
_open_transactions: list[OpenTransaction] = []


def join_open_transactions(provider: OpenTransaction) -> Callable[[], None]:
    """Registers `provider` for every SyncClient of this process: each blocking enqueue given no
    `conn` asks it for the transaction to join. Registering it again does nothing. Returns a
    function that removes it."""
    if provider not in _open_transactions:
        _open_transactions.append(provider)

    def remove() -> None:
        if provider in _open_transactions:
            _open_transactions.remove(provider)

    return remove


class JobBuilder:
    """Turns enqueue calls into complete, validated JobSpecs.

    A task the registry knows gives its queue, priority and max_attempts to every option left
    as None, and its handler's signature is checked against the payload. A task it does not know
    is enqueued by name only when the caller names the queue: nothing is sent to a default
    queue no worker may serve.
    """

    def __init__(
        self,
        registry: TaskRegistry | None,
        max_payload_bytes: int,
        credential_policy: CredentialPolicy | str = CredentialPolicy.WARN,
    ) -> None:
        self.registry = registry
        self.max_payload_bytes = max_payload_bytes
        self.credential_policy = credential_policy_from(credential_policy)

    def check(self, spec: JobSpec, task: AnyTask | None = None) -> JobSpec:
        """The spec completed from its task's policy and validated, ready to write (a copy: the
        caller's spec is not changed). Applies the credential policy."""
        return self.check_json(spec, task)[0]

    def check_json(self, spec: JobSpec, task: AnyTask | None = None) -> tuple[JobSpec, str]:
        """`check`, and the payload's compact JSON text (what COPY sends)."""
        payload_text = check_spec_json(spec, max_payload_bytes=self.max_payload_bytes)
        known = task or (self.registry.get(spec.task) if self.registry is not None else None)
        queue, priority, max_attempts = spec.queue, spec.priority, spec.max_attempts
        unique_option = spec.unique
        if known is not None:
            mismatch = known.accepts(spec.payload)
            if mismatch:
                raise ValidationError(
                    f"payload does not fit task {spec.task!r}: {mismatch}; "
                    f"pass the handler's keyword arguments ({known.parameters()})"
                )
            policy = known.policy
            queue = policy.queue if queue is None else queue
            priority = policy.priority if priority is None else priority
            max_attempts = policy.max_attempts if max_attempts is None else max_attempts
            unique_option = policy.unique if unique_option is None else unique_option
        elif queue is None:
            raise self._unknown(spec.task)
        else:
            priority = DEFAULT_PRIORITY if priority is None else priority
            max_attempts = DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
        check_credentials(spec.payload, self.credential_policy)
        unique = unique_from(unique_option)  # refuses a bad value, or a payload without its fields
        if unique is not None:
            unique.key_for(spec.task, spec.payload)
        check_idempotency_key(spec.idempotency_key)
        # One copy with every option filled in: enqueue_copy checks each of its jobs this way.
        complete = replace(spec, queue=queue, priority=priority, max_attempts=max_attempts, unique=unique)
        return complete, payload_text

    def _unknown(self, name: str) -> UnknownTask:
        by_name = (
            "or pass queue=... to enqueue it by name (the queue a worker that has the task serves; "
            "no task policy is applied and the payload is not checked)"
        )
        if self.registry is None or not len(self.registry):
            return UnknownTask(
                f"task {name!r} is unknown to this client, which has no registered tasks: enqueue "
                f"through the tenure.Tenure app that registers it, {by_name}"
            )
        return UnknownTask(
            f"task {name!r} is not registered in this app ({known_tasks_hint(self.registry, name)}): "
            f"import the module that defines it before enqueueing, {by_name}"
        )

    def spec(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        ordering_key: str | None = None,
        result_wanted: bool = False,
        unique: Any = None,
        idempotency_key: uuid.UUID | str | None = None,
    ) -> JobSpec:
        """A complete spec for one job; options left as None come from the task's policy.

        Args:
            task: the task, or its registered name.
            payload: the handler's keyword arguments, as JSON.
            queue: the queue; required for a task this client's registry does not know.
            priority: higher runs first.
            delay: seconds (or a timedelta) from now before the job may run.
            run_at: when the job may run; give `delay` or `run_at`, not both.
            max_attempts: runs before the job is dead.
            ordering_key: jobs sharing a key run one at a time, in enqueue order.
            result_wanted: a caller will wait for the result: the job's finish notifies at once.
            unique: a tenure.Unique, a key string or True (by the whole payload); False: not
                unique, whatever the task's policy.
            idempotency_key: the caller's own key for this enqueue: a retry after an ambiguous
                commit returns the job the first attempt stored.
        """
        name = task.name if isinstance(task, Task) else task
        spec = JobSpec(
            task=name,
            payload={} if payload is None else payload,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay.total_seconds() if isinstance(delay, timedelta) else delay,
            max_attempts=max_attempts,
            ordering_key=ordering_key,
            result_wanted=result_wanted,
            unique=unique,
            idempotency_key=idempotency_key,
        )
        return self.check(spec, task if isinstance(task, Task) else None)


def known_tasks_hint(registry: TaskRegistry, name: str) -> str:
    """'did you mean ...' with the closest registered names, else the registered names."""
    names = sorted(t.name for t in registry)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(map(repr, close)) + "?"
    shown = ", ".join(map(repr, names[:10]))
    more = f" and {len(names) - 10} more" if len(names) > 10 else ""
    return f"registered: {shown}{more}"


class _CopyRows:
    """COPY rows of `specs`, each checked as it is written (a spec that fails aborts the COPY,
    and its transaction writes nothing), and what to notify once they are written (`wakeups`;
    a job due later than `db_now` is scheduled, as job_insert_many decides). Checking while the
    server takes the rows already sent lets the two work at once."""

    def __init__(self, builder: JobBuilder, specs: Sequence[JobSpec], db_now: datetime) -> None:
        self.builder = builder
        self.specs = specs
        self.db_now = db_now
        self.wakeups = Wakeups()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        db_now = self.db_now
        for spec in self.specs:
            s, payload_text = self.builder.check_json(spec)
            _refuse_ordering_keys([s])
            available = s.run_at or (db_now + timedelta(seconds=s.delay or 0))
            scheduled = available > db_now
            state = JobState.SCHEDULED.value if scheduled else JobState.PENDING.value
            self.wakeups.add(s.queue or "default", available, scheduled)
            yield (
                s.queue,
                s.task,
                # jsonb's binary input is a version byte and the JSON text: the text the payload
                # check measured, sent as it is rather than encoded a second time.
                JSONB_BINARY_VERSION + payload_text.encode("utf-8"),
                s.priority,
                available,
                state,
                s.max_attempts,
                s.result_wanted,
            )


def _copy_rows(specs: Sequence[JobSpec], db_now: datetime) -> _CopyRows:
    """COPY rows of specs that name their queue, checked as a client with no registry checks
    them (the benchmark's bare-COPY baseline writes these)."""
    return _CopyRows(JobBuilder(None, DEFAULT_MAX_PAYLOAD_BYTES), specs, db_now)


def _refuse_ordering_keys(specs: Sequence[JobSpec]) -> None:
    """COPY cannot take the per-key enqueue locks that keep a key's ids in commit order, and
    has no ON CONFLICT: one job meeting a held unique key or a stored idempotency key would
    abort the whole load. Such jobs go through enqueue_many."""
    if any(s.ordering_key is not None for s in specs):
        raise ValidationError(
            "enqueue_copy does not accept jobs with an ordering_key; enqueue them with enqueue_many"
        )
    if any(s.unique is not None or s.idempotency_key is not None for s in specs):
        raise ValidationError(
            "enqueue_copy does not accept unique jobs or caller idempotency keys: COPY cannot skip a "
            "job whose key is taken, so one such job would abort the whole load; use enqueue_many"
        )


def _log_lost_wakeup(exc: BaseException) -> None:
    log.warning(
        "jobs enqueued, but the notification that wakes workers for them failed (%s): workers "
        "find them at their next poll",
        str(exc).strip() or type(exc).__name__,
    )


def check_idempotency_key(key: object) -> None:
    if key is None or isinstance(key, uuid.UUID):
        return
    if not isinstance(key, str) or not 1 <= len(key) <= 500:
        raise ValidationError(
            f"idempotency_key must be a UUID or a string of 1 to 500 characters, got {key!r}"
        )


def _listen_dsn(pool: AsyncConnectionPool[Any] | ConnectionPool[Any]) -> str | None:
    """Where a result waiter LISTENs: $TENURE_LISTEN_DSN when set (a direct connection, the pool
    going through PgBouncer in transaction mode, where a LISTEN hears nothing), else the pool's
    server (None, a pool that computes its DSN: the waiter polls)."""
    return os.environ.get(LISTEN_DSN_ENV) or (pool.conninfo if isinstance(pool.conninfo, str) else None)


def _connection_error(dsn: str, exc: psycopg.Error) -> DatabaseUnavailable | None:
    """What the caller sees of a database error: no free connection or no server is
    DatabaseUnavailable, a connection lost under a statement says its commit is in doubt, and
    any other error (None) is the caller's own (a constraint, a permission) and passes as it is."""
    if isinstance(exc, PoolTimeout):
        return unavailable(dsn, exc)
    if is_connection_lost(exc):
        return connection_lost(dsn, exc)
    return None


def _not_migrated(schema: str) -> SchemaNotMigrated:
    return SchemaNotMigrated(
        f"the Tenure schema {schema!r} is missing from this database: {migrate_hint(schema)}"
    )


class Client:
    """Async producer and inspection API over a pool (owned, or given)."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "tenure",
        pool: AsyncConnectionPool[Any] | None = None,
        registry: TaskRegistry | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        credential_policy: CredentialPolicy | str = CredentialPolicy.WARN,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.queries = Queries(schema)
        self.control = ControlQueries(schema)
        self.builder = JobBuilder(registry, max_payload_bytes, credential_policy)
        self._dsn = dsn
        self._pool = pool
        self._owns_pool = pool is None
        self._notify_limiter = NotifyLimiter()
        #: Wake-up notifications being sent after commits (_wake); close() lets them finish.
        self._waking: set[asyncio.Task[None]] = set()
        self._opening = asyncio.Lock()

    async def pool(self) -> AsyncConnectionPool[Any]:
        """The client's pool: the one it was given, else its own, opened on first use."""
        if self._pool is None:
            # Concurrent first uses (enqueues and their wake-ups) share one pool, not one each.
            async with self._opening:
                if self._pool is None:
                    self._pool = await open_pool(
                        resolve_dsn(self._dsn).dsn, min_size=1, max_size=4, name="tenure-client"
                    )
        return self._pool

    async def close(self) -> None:
        """Closes the client's own pool (a pool it was given stays open), once the wake-ups of
        its last enqueues are sent."""
        if self._waking:
            await asyncio.wait(self._waking, timeout=2.0)
        if self._pool is not None and self._owns_pool:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> Client:
        await self.pool()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _conn(self, conn: AsyncConnection[Any] | None) -> AsyncIterator[AsyncConnection[Any]]:
        try:
            if conn is not None:
                yield conn
            else:
                async with (await self.pool()).connection() as pooled:
                    yield pooled
        except _MISSING_SCHEMA:
            raise _not_migrated(self.schema) from None
        except psycopg.Error as exc:
            mapped = _connection_error(self._dsn or "", exc)
            if mapped is None:
                raise
            raise mapped from exc

    async def enqueue(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        conn: AsyncConnection[Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueuedJob:
        """Enqueues one job; with `conn`, inside that connection's current transaction.

        Options left out come from the task's policy; see JobBuilder for names it does not know.
        """
        return (await self._insert([self.builder.spec(task, payload, **options)], conn))[0]

    async def enqueue_many(
        self, specs: Iterable[JobSpec], *, conn: AsyncConnection[Any] | None = None
    ) -> list[EnqueuedJob]:
        """Enqueues many jobs in one statement, all or none, each checked like `enqueue`'s."""
        return await self._insert([self.builder.check(s) for s in specs], conn)

    async def _insert(self, checked: list[JobSpec], conn: AsyncConnection[Any] | None) -> list[EnqueuedJob]:
        if not checked:
            return []
        with enqueue_span(checked) as traced:
            async with self._conn(conn) as c:
                # Inside the caller's transaction the insert notifies, delivered at its commit;
                # a commit of the enqueue's own notifies after it (tenure.db.wakeups).
                wakeups = Wakeups() if owns_commit(c) else None
                if len(traced) == 1:
                    jobs = await self.queries.job_insert_many(c, traced, wakeups=wakeups)
                else:
                    async with c.transaction():  # several statements when keyed jobs are among them
                        jobs = await self.queries.job_insert_many(c, traced, wakeups=wakeups)
            if wakeups:
                self._wake(wakeups)
            return jobs

    def _wake(self, wakeups: Wakeups) -> None:
        """Notifies for committed jobs, as far as the limiter admits (tenure.db.wakeups), in the
        background on a connection of the client's pool. The enqueue is done once its jobs are
        committed: a failure or a cancellation of this hint (the caller's own timeout) must not
        report stored jobs as failed, which would invite enqueueing them again."""
        admitted = self._notify_limiter.admit(wakeups)
        if not admitted.wakeups:
            return
        task = asyncio.get_running_loop().create_task(self._send_wakeups(admitted))
        self._waking.add(task)
        task.add_done_callback(self._waking.discard)

    async def _send_wakeups(self, admitted: Admitted) -> None:
        try:
            async with (await self.pool()).connection() as conn:
                await self.queries.notify_wakeups(conn, admitted.wakeups, after_commit=True)
        except Exception as exc:  # a closed pool, a lost server: nothing the caller can act on
            _log_lost_wakeup(exc)  # workers find the jobs at their next poll
            return
        self._notify_limiter.sent(admitted)

    async def enqueue_copy(self, specs: Iterable[JobSpec]) -> int:
        """Bulk enqueue through COPY, in one transaction: all or none. A job that fails its
        checks raises, and the transaction writes nothing."""
        specs = list(specs)
        if not specs:
            return 0
        sql = named_queries(self.schema)
        async with self._conn(None) as c:
            if not await self.queries.may_insert(c):
                # A role that may not write jobs (the producer role) enqueues through the
                # database's enqueue() only: the same jobs, all or none, without COPY's speed.
                return len(await self.enqueue_many(specs, conn=c))
            after_commit = owns_commit(c)
            async with c.transaction():
                row = await (await c.execute(sql["clock_now"].encode())).fetchone()
                assert row is not None
                async with c.cursor() as cur, cur.copy(sql["job_copy_in"].encode()) as copy:
                    copy.set_types(_COPY_TYPES)
                    rows = _CopyRows(self.builder, specs, row[0])
                    for values in rows:
                        await copy.write_row(values)
                if not after_commit:
                    await self.queries.notify_wakeups(c, rows.wakeups, after_commit=False)
        if after_commit:
            self._wake(rows.wakeups)
        return len(specs)

    async def get_job(self, job_id: int) -> Job | None:
        """The job as stored now, or None when there is no job with that id."""
        async with self._conn(None) as c:
            return await self.queries.job_get(c, job_id)

    async def job_history(self, job_id: int) -> list[JobEvent]:
        """The job's audit events (retries, expiries, dead, reprocess, ...), oldest first."""
        async with self._conn(None) as c:
            return await self.queries.job_events_list(c, job_id)

    # -- job control ----------------------------------------------------------------

    async def cancel(
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
        async with self._conn(None) as c:
            rows = await self.control.cancel_many(
                c,
                checked,
                where,
                requeue=requeue,
                max_jobs=bound,
                actor=actor or default_actor(),
                reason=text,
            )
        return cancel_report(rows, requeue=requeue, max_jobs=bound, by_filter=checked is None)

    async def retry(
        self, ids: Sequence[int], *, reason: str, attempts: int = 1, actor: str | None = None
    ) -> list[int]:
        """Runs scheduled or pending jobs now, and reprocesses dead or cancelled ones with
        `attempts` more attempts; all or nothing."""
        checked = check_ids(ids)
        if not checked:
            raise ValidationError("name the jobs to retry")
        check_attempts(attempts)
        text = check_reason(reason, "retry")
        async with self._conn(None) as c:
            try:
                rows = await self.control.retry_many(
                    c, checked, attempts=attempts, actor=actor or default_actor(), reason=text
                )
            except psycopg.errors.UniqueViolation as exc:
                raise key_held(exc, "retried") from None
        return retry_report(rows)

    async def pause_queue(
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
        async with self._conn(None) as c:
            at = pause_until(until, await self.control.db_now(c))
            row = await self.control.pause(
                c, queue, until=at, actor=actor or default_actor(), reason=text, allow_unknown=allow_unknown
            )
        if not row["known"]:
            raise unknown_queue(queue)
        return QueuePause(queue, row["paused_at"], row["until"], actor or default_actor(), text)

    async def resume_queue(self, queue: str, *, reason: str | None = None, actor: str | None = None) -> None:
        """Ends `queue`'s pause; its workers are woken at once."""
        check_queue(queue)
        async with self._conn(None) as c:
            row = await self.control.resume(c, queue, actor=actor or default_actor(), reason=reason)
        if row is None or not row["was_in_effect"]:
            raise not_paused(queue)

    async def paused_queues(self) -> list[QueuePause]:
        """The pauses in effect."""
        async with self._conn(None) as c:
            return [queue_pause(r) for r in await self.control.pauses(c)]

    async def result(self, job_id: int, *, timeout: float | None = None, poll: float = 1.0) -> Any:
        """Waits for the job and returns its result (its handler's return value; None if it
        returned nothing). Raises JobFailed when it ends dead or cancelled, ResultTimeout after
        `timeout` seconds. Enqueue with result_wanted=True to be woken the moment it finishes;
        other jobs are read every `poll` seconds."""

        @contextlib.asynccontextmanager
        async def connection() -> AsyncIterator[AsyncConnection[Any]]:
            async with self._conn(None) as c:
                yield c

        pool = await self.pool()
        return await wait_for_result(
            self.control, connection, job_id, timeout=timeout, poll=poll, listen_dsn=_listen_dsn(pool)
        )


class SyncClient:
    """Blocking producer API, for enqueueing from Django, Flask or scripts."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "tenure",
        registry: TaskRegistry | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        credential_policy: CredentialPolicy | str = CredentialPolicy.WARN,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.queries = Queries(schema)
        self.control = ControlQueries(schema)
        self.builder = JobBuilder(registry, max_payload_bytes, credential_policy)
        self._dsn = dsn
        self._pool: ConnectionPool[Any] | None = None
        self._opening = threading.Lock()
        self._notify_limiter = NotifyLimiter()

    def _get_pool(self) -> ConnectionPool[Any]:
        if self._pool is None:
            # Threads of a web server may all make their first enqueue at once: one pool for all.
            with self._opening:
                if self._pool is None:
                    self._pool = self._open_pool()
        return self._pool

    def _open_pool(self) -> ConnectionPool[Any]:
        dsn = resolve_dsn(self._dsn).dsn
        threshold = prepare_threshold()
        check_before_pool_sync(dsn, threshold, timeout=10, name="tenure-sync")
        pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            open=False,
            name="tenure-sync",
            kwargs={
                "autocommit": True,
                "prepare_threshold": threshold,
                **application_name(dsn, "tenure-sync"),
            },
        )
        try:
            pool.open(wait=True, timeout=10)
        except Exception as exc:
            pool.close()
            raise unavailable(dsn, exc) from None
        return pool

    def close(self) -> None:
        """Closes the client's pool; the next call opens a new one."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @property
    def dsn(self) -> str | None:
        """The DSN this client connects with: its own, else $TENURE_DSN; None for the embedded server."""
        return self._dsn or os.environ.get(DSN_ENV)

    @contextlib.contextmanager
    def _joined(self, conn: Connection[Any] | None) -> Iterator[Connection[Any] | None]:
        """`conn`, else the connection of a transaction a registered provider says this enqueue
        joins, else None (the pool)."""
        if conn is not None or not _open_transactions:
            yield conn
            return
        with contextlib.ExitStack() as stack:
            for provider in list(_open_transactions):
                joined = stack.enter_context(provider(self))
                if joined is not None:
                    yield joined
                    return
            yield None

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
                with self._get_pool().connection() as pooled:
                    yield pooled
        except _MISSING_SCHEMA:
            raise _not_migrated(self.schema) from None
        except psycopg.Error as exc:
            mapped = _connection_error(self._dsn or "", exc)
            if mapped is None:
                raise
            raise mapped from exc

    def enqueue(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        conn: Connection[Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueuedJob:
        """Blocking `Client.enqueue`."""
        return self._insert([self.builder.spec(task, payload, **options)], conn)[0]

    def enqueue_many(
        self, specs: Iterable[JobSpec], *, conn: Connection[Any] | None = None
    ) -> list[EnqueuedJob]:
        """Blocking `Client.enqueue_many`."""
        return self._insert([self.builder.check(s) for s in specs], conn)

    def _insert(self, checked: list[JobSpec], conn: Connection[Any] | None) -> list[EnqueuedJob]:
        if not checked:
            return []
        with self._joined(conn) as joined, enqueue_span(checked) as traced, self._conn(joined) as c:
            wakeups = Wakeups() if owns_commit(c) else None  # as Client._insert
            if len(traced) == 1:
                jobs = self.queries.job_insert_many_sync(c, traced, wakeups=wakeups)
            else:
                with c.transaction():
                    jobs = self.queries.job_insert_many_sync(c, traced, wakeups=wakeups)
            if wakeups:
                self._wake(c, wakeups)
            return jobs

    def _wake(self, conn: Connection[Any], wakeups: Wakeups) -> None:
        admitted = self._notify_limiter.admit(wakeups)
        if not admitted.wakeups:
            return
        try:
            self.queries.notify_wakeups_sync(conn, admitted.wakeups, after_commit=True)
        except psycopg.Error as exc:
            _log_lost_wakeup(exc)
            return
        self._notify_limiter.sent(admitted)

    def enqueue_copy(self, specs: Iterable[JobSpec]) -> int:
        """Blocking `Client.enqueue_copy`."""
        specs = list(specs)
        if not specs:
            return 0
        sql = named_queries(self.schema)
        with self._joined(None) as joined, self._conn(joined) as c:
            if not self.queries.may_insert_sync(c):  # as Client.enqueue_copy
                return len(self.enqueue_many(specs, conn=c))
            after_commit = owns_commit(c)
            with c.transaction():
                row = c.execute(sql["clock_now"].encode()).fetchone()
                assert row is not None
                with c.cursor() as cur, cur.copy(sql["job_copy_in"].encode()) as copy:
                    copy.set_types(_COPY_TYPES)
                    rows = _CopyRows(self.builder, specs, row[0])
                    for values in rows:
                        copy.write_row(values)
                if not after_commit:
                    self.queries.notify_wakeups_sync(c, rows.wakeups, after_commit=False)
            if after_commit:
                self._wake(c, rows.wakeups)
        return len(specs)

    def get_job(self, job_id: int) -> Job | None:
        """The job as stored now, or None when there is no job with that id."""
        with self._conn(None) as c:
            return self.queries.job_get_sync(c, job_id)

    def job_history(self, job_id: int) -> list[JobEvent]:
        """The job's audit events (retries, expiries, dead, reprocess, ...), oldest first."""
        with self._conn(None) as c:
            return self.queries.job_events_list_sync(c, job_id)

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
        """Blocking `Client.cancel`."""
        where = CancelFilter(queue, task, contains, older_than, running)
        checked, bound = check_cancel(ids, where, requeue=requeue, max_jobs=max_jobs)
        text = check_reason(reason, "cancel")
        with self._conn(None) as c:
            rows = self.control.cancel_many_sync(
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
        """Blocking `Client.retry`."""
        checked = check_ids(ids)
        if not checked:
            raise ValidationError("name the jobs to retry")
        check_attempts(attempts)
        text = check_reason(reason, "retry")
        with self._conn(None) as c:
            try:
                rows = self.control.retry_many_sync(
                    c, checked, attempts=attempts, actor=actor or default_actor(), reason=text
                )
            except psycopg.errors.UniqueViolation as exc:
                raise key_held(exc, "retried") from None
        return retry_report(rows)

    def pause_queue(
        self,
        queue: str,
        *,
        reason: str,
        until: datetime | timedelta | float | None = None,
        allow_unknown: bool = False,
        actor: str | None = None,
    ) -> QueuePause:
        """Blocking `Client.pause_queue`."""
        check_queue(queue)
        text = check_reason(reason, "pause a queue")
        with self._conn(None) as c:
            at = pause_until(until, self.control.db_now_sync(c))
            paused = self.control.pause_sync(
                c, queue, until=at, actor=actor or default_actor(), reason=text, allow_unknown=allow_unknown
            )
        if not paused["known"]:
            raise unknown_queue(queue)
        return QueuePause(queue, paused["paused_at"], paused["until"], actor or default_actor(), text)

    def resume_queue(self, queue: str, *, reason: str | None = None, actor: str | None = None) -> None:
        """Blocking `Client.resume_queue`."""
        check_queue(queue)
        with self._conn(None) as c:
            row = self.control.resume_sync(c, queue, actor=actor or default_actor(), reason=reason)
        if row is None or not row["was_in_effect"]:
            raise not_paused(queue)

    def paused_queues(self) -> list[QueuePause]:
        """Blocking `Client.paused_queues`."""
        with self._conn(None) as c:
            return [queue_pause(r) for r in self.control.pauses_sync(c)]

    def result(self, job_id: int, *, timeout: float | None = None, poll: float = 1.0) -> Any:
        """Blocking `Client.result`."""

        @contextlib.contextmanager
        def connection() -> Iterator[Connection[Any]]:
            with self._conn(None) as c:
                yield c

        dsn = _listen_dsn(self._get_pool())
        return wait_for_result_sync(
            self.control, connection, job_id, timeout=timeout, poll=poll, listen_dsn=dsn
        )

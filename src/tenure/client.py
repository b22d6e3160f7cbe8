"""Enqueueing and inspecting jobs, async (`Client`) and blocking (`SyncClient`).

Both validate every job before writing anything. Pass `conn=` to enqueue inside your own
transaction: the job then exists only if your transaction commits, and listeners are woken
only after it does (NOTIFY is delivered at commit).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from tenure.db._sqlfiles import named_queries
from tenure.db.connect import open_pool, resolve_dsn, unavailable
from tenure.db.queries import Queries
from tenure.errors import SchemaNotMigrated, UnknownTask, ValidationError
from tenure.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    EnqueuedJob,
    Job,
    JobEvent,
    JobSpec,
    JobState,
)
from tenure.secrets import CredentialPolicy, check_credentials, credential_policy_from
from tenure.tasks import Task, TaskRegistry
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_schema_name, check_spec

# The state goes as text: in COPY's binary format an enum value is its label's bytes.
_COPY_TYPES = ["text", "text", "jsonb", "int2", "timestamptz", "text", "int4"]
_MISSING_SCHEMA = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedObject,
)


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

    def check(self, spec: JobSpec, task: Task | None = None) -> JobSpec:
        """The spec completed from its task's policy and validated, ready to write (a copy: the
        caller's spec is not changed). Applies the credential policy (E4)."""
        check_spec(spec, max_payload_bytes=self.max_payload_bytes)
        known = task or (self.registry.get(spec.task) if self.registry is not None else None)
        if known is not None:
            mismatch = known.accepts(spec.payload)
            if mismatch:
                raise ValidationError(
                    f"payload does not fit task {spec.task!r}: {mismatch}; "
                    f"pass the handler's keyword arguments ({known.parameters()})"
                )
            policy = known.policy
            complete = replace(
                spec,
                queue=policy.queue if spec.queue is None else spec.queue,
                priority=policy.priority if spec.priority is None else spec.priority,
                max_attempts=policy.max_attempts if spec.max_attempts is None else spec.max_attempts,
            )
        elif spec.queue is None:
            raise self._unknown(spec.task)
        else:
            complete = replace(
                spec,
                priority=DEFAULT_PRIORITY if spec.priority is None else spec.priority,
                max_attempts=DEFAULT_MAX_ATTEMPTS if spec.max_attempts is None else spec.max_attempts,
            )
        check_credentials(complete.payload, self.credential_policy)
        return complete

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
        task: str | Task,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        ordering_key: str | None = None,
    ) -> JobSpec:
        """A complete spec for one job; options left as None come from the task's policy."""
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
    """COPY rows of `specs`, and what to notify once they are written: the queues that got due
    jobs, and the earliest run time among scheduled ones (a job due later than `db_now` is
    scheduled, as job_insert_many decides)."""

    def __init__(self, specs: Sequence[JobSpec], db_now: datetime) -> None:
        self.specs = specs
        self.db_now = db_now
        self.due_queues: set[str] = set()
        self.first_scheduled: datetime | None = None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        from psycopg.types.json import Jsonb

        db_now = self.db_now
        for s in self.specs:
            available = s.run_at or (db_now + timedelta(seconds=s.delay or 0))
            if available > db_now:
                state = JobState.SCHEDULED.value
                if self.first_scheduled is None or available < self.first_scheduled:
                    self.first_scheduled = available
            else:
                state = JobState.PENDING.value
                self.due_queues.add(s.queue or "default")
            yield (s.queue, s.task, Jsonb(s.payload), s.priority, available, state, s.max_attempts)


def _copy_rows(specs: Sequence[JobSpec], db_now: datetime) -> _CopyRows:
    return _CopyRows(specs, db_now)


def _refuse_ordering_keys(specs: Sequence[JobSpec]) -> None:
    """COPY cannot take the per-key enqueue locks that keep a key's ids in commit order (O2)."""
    if any(s.ordering_key is not None for s in specs):
        raise ValidationError(
            "enqueue_copy does not accept jobs with an ordering_key; enqueue them with enqueue_many"
        )


def _not_migrated(schema: str) -> SchemaNotMigrated:
    return SchemaNotMigrated(
        f"the Tenure schema {schema!r} is missing from this database: run `tenure migrate --schema {schema}`"
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
        self.builder = JobBuilder(registry, max_payload_bytes, credential_policy)
        self._dsn = dsn
        self._pool = pool
        self._owns_pool = pool is None

    async def pool(self) -> AsyncConnectionPool[Any]:
        if self._pool is None:
            self._pool = await open_pool(
                resolve_dsn(self._dsn).dsn, min_size=1, max_size=4, name="tenure-client"
            )
        return self._pool

    async def close(self) -> None:
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
        except psycopg.OperationalError as exc:
            raise unavailable(self._dsn or "", exc) from exc

    async def enqueue(
        self,
        task: str | Task,
        payload: dict[str, Any] | None = None,
        *,
        conn: AsyncConnection[Any] | None = None,
        **options: Any,
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
        async with self._conn(conn) as c:
            return await self.queries.job_insert_many(c, checked)

    async def enqueue_copy(self, specs: Iterable[JobSpec]) -> int:
        """Bulk enqueue through COPY, in one transaction: all or none (P4)."""
        checked = [self.builder.check(s) for s in specs]
        _refuse_ordering_keys(checked)
        if not checked:
            return 0
        sql = named_queries(self.schema)
        async with self._conn(None) as c, c.transaction():
            row = await (await c.execute(sql["clock_now"].encode())).fetchone()
            assert row is not None
            async with c.cursor() as cur, cur.copy(sql["job_copy_in"].encode()) as copy:
                copy.set_types(_COPY_TYPES)
                rows = _copy_rows(checked, row[0])
                for values in rows:
                    await copy.write_row(values)
            await self.queries.queue_notify(c, sorted(rows.due_queues), rows.first_scheduled)
        return len(checked)

    async def get_job(self, job_id: int) -> Job | None:
        """The job as stored now, or None when there is no job with that id."""
        async with self._conn(None) as c:
            return await self.queries.job_get(c, job_id)

    async def job_history(self, job_id: int) -> list[JobEvent]:
        """The job's audit events (retries, expiries, dead, reprocess, ...), oldest first."""
        async with self._conn(None) as c:
            return await self.queries.job_events_list(c, job_id)


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
        self.builder = JobBuilder(registry, max_payload_bytes, credential_policy)
        self._dsn = dsn
        self._pool: ConnectionPool[Any] | None = None

    def _get_pool(self) -> ConnectionPool[Any]:
        if self._pool is None:
            dsn = resolve_dsn(self._dsn).dsn
            try:  # fail at once on an unreachable server, not after the pool's timeout
                psycopg.connect(dsn, connect_timeout=10).close()
            except psycopg.OperationalError as exc:
                raise unavailable(dsn, exc) from None
            self._pool = ConnectionPool(
                dsn,
                min_size=1,
                max_size=4,
                open=False,
                name="tenure-sync",
                kwargs={"autocommit": True},
            )
            try:
                self._pool.open(wait=True, timeout=10)
            except Exception as exc:
                self._pool.close()
                self._pool = None
                raise unavailable(dsn, exc) from None
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
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
                with self._get_pool().connection() as pooled:
                    yield pooled
        except _MISSING_SCHEMA:
            raise _not_migrated(self.schema) from None

    def enqueue(
        self,
        task: str | Task,
        payload: dict[str, Any] | None = None,
        *,
        conn: Connection[Any] | None = None,
        **options: Any,
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
        with self._conn(conn) as c:
            return self.queries.job_insert_many_sync(c, checked)

    def enqueue_copy(self, specs: Iterable[JobSpec]) -> int:
        checked = [self.builder.check(s) for s in specs]
        _refuse_ordering_keys(checked)
        if not checked:
            return 0
        sql = named_queries(self.schema)
        with self._conn(None) as c, c.transaction():
            row = c.execute(sql["clock_now"].encode()).fetchone()
            assert row is not None
            with c.cursor() as cur, cur.copy(sql["job_copy_in"].encode()) as copy:
                copy.set_types(_COPY_TYPES)
                rows = _copy_rows(checked, row[0])
                for values in rows:
                    copy.write_row(values)
            self.queries.queue_notify_sync(c, sorted(rows.due_queues), rows.first_scheduled)
        return len(checked)

    def get_job(self, job_id: int) -> Job | None:
        """The job as stored now, or None when there is no job with that id."""
        with self._conn(None) as c:
            return self.queries.job_get_sync(c, job_id)

    def job_history(self, job_id: int) -> list[JobEvent]:
        """The job's audit events (retries, expiries, dead, reprocess, ...), oldest first."""
        with self._conn(None) as c:
            return self.queries.job_events_list_sync(c, job_id)

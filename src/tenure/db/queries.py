"""The only place SQL meets Python: one typed function per named query.

Queries are loaded once per schema from the .sql files beside this module. Every function
takes ``now``: None means the database clock, a datetime lets tests move time without sleeping.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor, Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

from tenure.db._sqlfiles import named_queries
from tenure.db.text import storable_text
from tenure.db.wakeups import Wakeups
from tenure.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    ClaimedJob,
    EnqueuedJob,
    Job,
    JobEvent,
    JobSpec,
    JobState,
    Lease,
)
from tenure.unique import held_key, unique_from

log = logging.getLogger("tenure.worker")

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TaskLeasePolicy:
    """Lease length and max runtime the claim applies to one task name."""

    task: str
    lease_seconds: float
    max_runtime_seconds: float


@dataclass(frozen=True, slots=True)
class TaskBackoffPolicy:
    """The retry backoff recovery applies to one task name's expired leases."""

    task: str
    base: float
    cap: float
    jitter: float


@dataclass(frozen=True, slots=True)
class RecoveredLease:
    job_id: int
    state: JobState
    previous_owner: str
    token: int
    queue: str
    available_at: datetime
    """When the job runs again (its backoff's end); unchanged for a dead job."""


@dataclass(frozen=True, slots=True)
class Promotion:
    """One promotion statement: how many due scheduled jobs became pending, and when the next
    scheduled job is due (database time; None when no job is scheduled after `db_now`)."""

    promoted: int
    next_due: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class FailOutcome:
    """What a fenced failure write did: 'failed' (the job moved to `state`), 'busy' (its row was
    locked elsewhere; nothing changed, try again) or 'lost' (the fence did not hold)."""

    outcome: str
    state: JobState | None
    available_at: datetime | None


@dataclass(frozen=True, slots=True)
class LeaseExtension:
    job_id: int
    token: int
    expires_at: datetime
    db_now: datetime


@dataclass(frozen=True, slots=True)
class QueueStateCount:
    queue: str
    state: JobState
    jobs: int
    oldest_claimable_at: datetime | None
    leases_near_expiry: int
    db_now: datetime


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema; the payload is the queue name, or a scheduled hint."""
    return f"tenure:{schema}"[:63]


#: A NOTIFY payload that starts with this is not a queue (no queue name can start with it): jobs
#: were scheduled, the earliest due at the epoch seconds that follow (database time).
SCHEDULED_PREFIX = "*"


#: A NOTIFY payload that starts with this tells workers a running job was revoked:
#: "<prefix><job id>:<the revoked token>". No queue name can start with it either.
REVOKE_PREFIX = "!"


def revoke_hint(payload: str) -> tuple[int, int] | None:
    """The (job id, revoked token) a revoke notice carries, or None when `payload` is not one."""
    if not payload.startswith(REVOKE_PREFIX):
        return None
    job_id, _, token = payload[len(REVOKE_PREFIX) :].partition(":")
    try:
        return int(job_id), int(token)
    except ValueError:
        return None


def scheduled_hint(payload: str) -> datetime | None:
    """The due time a scheduled hint carries, or None when `payload` is not one."""
    if not payload.startswith(SCHEDULED_PREFIX):
        return None
    try:
        return datetime.fromtimestamp(float(payload[len(SCHEDULED_PREFIX) :]), tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


async def _fetch(conn: AsyncConnection[Any], query: str, params: dict[str, Any]) -> list[Row]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []


#: The columns both claim statements return, in order.
CLAIM_COLUMNS = (
    "id", "queue", "task", "payload", "priority", "attempt_count", "max_attempts", "lease_token",
    "lease_expires_at", "lease_deadline", "progress", "idempotency_key", "available_at",
    "created_at", "result_wanted", "snoozes", "trace_context", "db_now",
)  # fmt: skip


def _check_claim_columns(description: Sequence[Any] | None) -> None:
    if description is not None and tuple(c.name for c in description) != CLAIM_COLUMNS:
        raise RuntimeError(f"the claim returned columns {[c.name for c in description]}, not {CLAIM_COLUMNS}")


def _fetch_sync(conn: Connection[Any], query: str, params: dict[str, Any]) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def _readable(row: Row) -> Row:
    """A job row read with its JSON as text: each value decoded where it can be, and emptied,
    with the reason in `unreadable`, where it cannot."""
    problems = []
    for column, empty in (("payload", {}), ("progress", None), ("result", None)):
        text = row.get(column)
        if text is None:
            continue
        try:
            row[column] = json.loads(text)
        except UNREADABLE as exc:
            row[column] = empty
            problems.append(f"its {column} ({len(text):,} characters of JSON): {type(exc).__name__}: {exc}")
    row["unreadable"] = "; ".join(problems) or None
    return row


def _job(row: Row) -> Job:
    return Job(**{**row, "state": JobState(row["state"])})


#: What reading one claimed row can raise when a value in it cannot be read by this client.
UNREADABLE = (psycopg.DataError, ValueError, RecursionError)
#: The error code of a claimed job whose row could not be read, set aside as dead unrun.
UNREADABLE_ROW = "UNREADABLE_ROW"

#: The fewest due jobs a limited claim looks at to find ones whose keys have room.
LIMITED_CLAIM_WINDOW = 100
#: How often an enqueue tries again for a job whose key-holder finished between its insert and
#: the lookup of that holder (each time the key was held, and then no longer).
INSERT_ROUNDS = 5
#: Caller-given idempotency keys that are strings become UUIDs in this namespace.
IDEMPOTENCY_NAMESPACE = uuid.UUID("6f2c1d9e-4b7a-5e8f-9a3b-2d1c0e4f5a6b")


def idempotency_key_of(spec: JobSpec) -> uuid.UUID:
    given = spec.idempotency_key
    if given is None:
        return uuid.uuid4()
    if isinstance(given, uuid.UUID):
        return given
    return uuid.uuid5(IDEMPOTENCY_NAMESPACE, given)


def _lone(spec: JobSpec) -> bool:
    """Whether `spec` alone goes through job_insert_one: no key that could meet a stored job
    or that orders it behind others (those need job_insert_many's arbiters and locks)."""
    return spec.ordering_key is None and not _keyed(spec)


def _columns(spec: JobSpec) -> dict[str, Any]:
    """The columns both insert statements take from `spec` as they are. The client hands over
    complete specs (resolved against the task registry; an unknown task refused without a
    queue); a spec written here directly, as tests and internal tools do, takes the 'default'
    queue and the columns' defaults."""
    return {
        "queue": spec.queue or "default",
        "task": spec.task,
        "priority": DEFAULT_PRIORITY if spec.priority is None else spec.priority,
        "max_attempts": DEFAULT_MAX_ATTEMPTS if spec.max_attempts is None else spec.max_attempts,
        "result_wanted": spec.result_wanted,
    }


def _keyed(spec: JobSpec) -> bool:
    """Whether an insert of `spec` can meet a stored key (unique, or the caller's own key)."""
    return spec.idempotency_key is not None or (spec.unique is not None and spec.unique is not False)


class InsertRace(RuntimeError):
    """A job's unique key was held at its insert and free at the lookup, round after round."""


def _event(row: Row) -> JobEvent:
    return JobEvent(
        **{
            **row,
            "from_state": JobState(row["from_state"]) if row["from_state"] else None,
            "to_state": JobState(row["to_state"]) if row["to_state"] else None,
        }
    )


class Queries:
    """Typed access to the named queries of one Tenure schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.channel = notify_channel(schema)
        self.results_channel = results_channel(schema)
        self._sql = named_queries(schema)
        self._claim_columns_checked: set[str] = set()
        #: Per connection: whether its role may insert jobs itself, asked once.
        self._insert_allowed: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    # -- producers --------------------------------------------------------------------------

    def _lone_insert(
        self, specs: Sequence[JobSpec], now: datetime | None, wakeups: Wakeups | None
    ) -> tuple[uuid.UUID, dict[str, Any]] | None:
        """The key and job_insert_one's parameters when `specs` is one job without keys (the
        usual enqueue: one job per transaction), else None: job_insert_many's turn."""
        if len(specs) != 1 or not _lone(specs[0]):
            return None
        spec = specs[0]
        key = idempotency_key_of(spec)
        return key, {
            **_columns(spec),
            "payload": payload_json(spec.payload),
            "idempotency_key": key,
            "run_at": spec.run_at,
            "delay": None if spec.delay is None else float(spec.delay),
            "trace_context": None if spec.trace_context is None else Jsonb(spec.trace_context),
            "channel": self.channel,
            "scheduled_prefix": SCHEDULED_PREFIX,
            "notify": wakeups is None,
            "now": now,
        }

    def _insert_params(
        self,
        specs: Sequence[JobSpec],
        keys: Sequence[uuid.UUID | None],
        now: datetime | None,
        wakeups: Wakeups | None = None,
    ) -> dict[str, Any]:
        unique = _unique_params(specs)
        jobs = []
        for i, spec in enumerate(specs):
            job: dict[str, Any] = {**_columns(spec), "payload": spec.payload}
            if keys[i] is not None:  # left out, enqueue() draws one
                job["idempotency_key"] = str(keys[i])
            # Absent rather than null: ->> reads either as NULL, but -> reads null as JSON null.
            optional = {
                "run_at": None if spec.run_at is None else spec.run_at.isoformat(),
                "delay": spec.delay,
                "ordering_key": spec.ordering_key,
                "unique_key": unique["unique_keys"][i],
                "unique_part": unique["unique_parts"][i],
                "unique_states": unique["unique_states"][i],
                "unique_period": unique["unique_periods"][i],
                "trace_context": spec.trace_context,
            }
            job.update((k, v) for k, v in optional.items() if v is not None)
            jobs.append(job)
        return {
            "jobs": json.dumps(jobs, separators=(",", ":"), ensure_ascii=False),
            "ordering_lock_space": f"tenure.ordering:{self.schema}",
            "channel": self.channel,
            "scheduled_prefix": SCHEDULED_PREFIX,
            "notify": wakeups is None,
            "now": now,
            **unique,
        }

    async def job_insert_many(
        self,
        conn: AsyncConnection[Any],
        specs: Sequence[JobSpec],
        now: datetime | None = None,
        wakeups: Wakeups | None = None,
    ) -> list[EnqueuedJob]:
        """Stores the jobs, in order. A job whose idempotency key is stored already, or whose
        unique key another job holds, comes back as that job (`existing`) and is not stored.
        Give `conn` a transaction when `specs` mixes such jobs with others (several statements).

        The statements notify the jobs' queues, unless `wakeups` is given: then they notify
        nothing and add what to notify to it, for the caller to send once it has committed.

        A role that may not insert jobs itself (the producer role) enqueues through the
        database's enqueue() instead, which checks and completes each job (docs/sql.md)."""
        if not await self.may_insert(conn):
            rows = await _fetch(conn, self._sql["job_enqueue_call"], self._call_params(specs, wakeups))
            return self._called(rows, specs, wakeups)
        if lone := self._lone_insert(specs, now, wakeups):
            rows = await _fetch(conn, self._sql["job_insert_one"], lone[1])
            return [self._inserted(rows[0], lone[0], specs[0], wakeups)]
        out: list[EnqueuedJob | None] = [None] * len(specs)
        plain = [i for i, s in enumerate(specs) if not _keyed(s)]
        if plain:
            keys = [idempotency_key_of(specs[i]) for i in plain]
            params = self._insert_params([specs[i] for i in plain], keys, now, wakeups)
            rows = await _fetch(conn, self._sql["job_insert_many"], params)
            for i, row, key in zip(plain, rows, keys, strict=True):
                out[i] = self._inserted(row, key, specs[i], wakeups)
        for i, spec in enumerate(specs):
            if out[i] is None:
                out[i] = await self._insert_keyed(conn, spec, now, wakeups)
        return [job for job in out if job is not None]

    async def task_policies_declare(
        self, conn: AsyncConnection[Any], tasks: Sequence[Mapping[str, Any]], declared_by: str
    ) -> None:
        """Records what enqueue() completes each task's jobs from: dicts of task, queue, priority,
        max_attempts and, for a unique task, unique_fields or unique_whole, unique_states and
        unique_period."""
        if tasks:
            params = {"tasks": json.dumps(list(tasks)), "declared_by": storable_text(declared_by, 200)}
            await _fetch(conn, self._sql["task_policies_declare"], params)

    async def may_insert(self, conn: AsyncConnection[Any]) -> bool:
        """Whether `conn`'s role may insert jobs itself (else it enqueues through enqueue())."""
        allowed = self._insert_allowed.get(conn)
        if allowed is None:
            rows = await _fetch(conn, self._sql["jobs_insert_allowed"], {})
            allowed = self._insert_allowed[conn] = bool(rows[0]["allowed"])
        return allowed

    def may_insert_sync(self, conn: Connection[Any]) -> bool:
        allowed = self._insert_allowed.get(conn)
        if allowed is None:
            rows = _fetch_sync(conn, self._sql["jobs_insert_allowed"], {})
            allowed = self._insert_allowed[conn] = bool(rows[0]["allowed"])
        return allowed

    def _call_params(self, specs: Sequence[JobSpec], wakeups: Wakeups | None) -> dict[str, Any]:
        keys = [None if s.idempotency_key is None else idempotency_key_of(s) for s in specs]
        return {"jobs": self._insert_params(specs, keys, None, wakeups)["jobs"], "notify": wakeups is None}

    def _called(
        self, rows: Sequence[Row], specs: Sequence[JobSpec], wakeups: Wakeups | None
    ) -> list[EnqueuedJob]:
        """EnqueuedJobs of enqueue()'s rows. The role reads no idempotency keys: a job gets back
        only the key its caller gave."""
        out = []
        for row, spec in zip(rows, specs, strict=True):
            unique = unique_from(spec.unique)
            key = None if spec.idempotency_key is None else idempotency_key_of(spec)
            held = None if unique is None else unique.key_for(spec.task, spec.payload)
            if wakeups is not None and not row["existing"]:
                wakeups.add(spec.queue or "default", row["available_at"], row["scheduled"])
            out.append(EnqueuedJob(row["id"], key, row["available_at"], row["existing"], held))
        return out

    @staticmethod
    def _inserted(
        row: Row, key: uuid.UUID, spec: JobSpec, wakeups: Wakeups | None, unique_key: str | None = None
    ) -> EnqueuedJob:
        if wakeups is not None:
            wakeups.add(spec.queue or "default", row["available_at"], row["scheduled"])
        return EnqueuedJob(row["id"], key, row["available_at"], False, unique_key)

    async def _insert_keyed(
        self, conn: AsyncConnection[Any], spec: JobSpec, now: datetime | None, wakeups: Wakeups | None
    ) -> EnqueuedJob:
        key = idempotency_key_of(spec)
        params = self._insert_params([spec], [key], now, wakeups)
        for _ in range(INSERT_ROUNDS):
            rows = await _fetch(conn, self._sql["job_insert_many"], params)
            if rows:
                return self._inserted(rows[0], key, spec, wakeups, _held_key(params))
            holder = await _fetch(conn, self._sql["job_find_holder"], _holder_params(params, key))
            if holder:
                return _existing(holder[0], key, _held_key(params))
        raise InsertRace(_RACE)

    def job_insert_many_sync(
        self,
        conn: Connection[Any],
        specs: Sequence[JobSpec],
        now: datetime | None = None,
        wakeups: Wakeups | None = None,
    ) -> list[EnqueuedJob]:
        if not self.may_insert_sync(conn):
            rows = _fetch_sync(conn, self._sql["job_enqueue_call"], self._call_params(specs, wakeups))
            return self._called(rows, specs, wakeups)
        if lone := self._lone_insert(specs, now, wakeups):
            rows = _fetch_sync(conn, self._sql["job_insert_one"], lone[1])
            return [self._inserted(rows[0], lone[0], specs[0], wakeups)]
        out: list[EnqueuedJob | None] = [None] * len(specs)
        plain = [i for i, s in enumerate(specs) if not _keyed(s)]
        if plain:
            keys = [idempotency_key_of(specs[i]) for i in plain]
            params = self._insert_params([specs[i] for i in plain], keys, now, wakeups)
            rows = _fetch_sync(conn, self._sql["job_insert_many"], params)
            for i, row, key in zip(plain, rows, keys, strict=True):
                out[i] = self._inserted(row, key, specs[i], wakeups)
        for i, spec in enumerate(specs):
            if out[i] is None:
                out[i] = self._insert_keyed_sync(conn, spec, now, wakeups)
        return [job for job in out if job is not None]

    def _insert_keyed_sync(
        self, conn: Connection[Any], spec: JobSpec, now: datetime | None, wakeups: Wakeups | None
    ) -> EnqueuedJob:
        key = idempotency_key_of(spec)
        params = self._insert_params([spec], [key], now, wakeups)
        for _ in range(INSERT_ROUNDS):
            rows = _fetch_sync(conn, self._sql["job_insert_many"], params)
            if rows:
                return self._inserted(rows[0], key, spec, wakeups, _held_key(params))
            holder = _fetch_sync(conn, self._sql["job_find_holder"], _holder_params(params, key))
            if holder:
                return _existing(holder[0], key, _held_key(params))
        raise InsertRace(_RACE)

    def _notify_params(
        self, queues: Sequence[str], first_scheduled: datetime | None, after_commit: bool
    ) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "queues": list(queues),
            "first_scheduled": first_scheduled,
            "scheduled_prefix": SCHEDULED_PREFIX,
            "after_commit": after_commit,
        }

    async def queue_notify(
        self,
        conn: AsyncConnection[Any],
        queues: Sequence[str],
        first_scheduled: datetime | None = None,
        *,
        after_commit: bool = False,
    ) -> None:
        """Wakes the queues' listeners, and promoters for a job scheduled at `first_scheduled`.
        `after_commit`: a transaction of its own (only where tenure.db.wakeups.owns_commit),
        committed without waiting for its flush."""
        params = self._notify_params(queues, first_scheduled, after_commit)
        await _fetch(conn, self._sql["queue_notify"], params)

    def queue_notify_sync(
        self,
        conn: Connection[Any],
        queues: Sequence[str],
        first_scheduled: datetime | None = None,
        *,
        after_commit: bool = False,
    ) -> None:
        params = self._notify_params(queues, first_scheduled, after_commit)
        _fetch_sync(conn, self._sql["queue_notify"], params)

    async def notify_wakeups(
        self, conn: AsyncConnection[Any], wakeups: Wakeups, *, after_commit: bool
    ) -> None:
        """Sends `wakeups`: in the current transaction, or `after_commit` of the jobs' own."""
        if wakeups:
            await self.queue_notify(
                conn, sorted(wakeups.queues), wakeups.first_scheduled, after_commit=after_commit
            )

    def notify_wakeups_sync(self, conn: Connection[Any], wakeups: Wakeups, *, after_commit: bool) -> None:
        if wakeups:
            self.queue_notify_sync(
                conn, sorted(wakeups.queues), wakeups.first_scheduled, after_commit=after_commit
            )

    # -- inspection and operators -----------------------------------------------------------

    async def job_get(self, conn: AsyncConnection[Any], job_id: int) -> Job | None:
        """The job as stored. A row whose JSON this client cannot read (set aside by the claim as
        UNREADABLE_ROW) still comes back, with those values empty and `unreadable` saying why."""
        try:
            rows = await _fetch(conn, self._sql["job_get"], {"id": job_id})
        except UNREADABLE:
            async with conn.cursor(row_factory=dict_row) as cur:
                cur.adapters.register_loader("jsonb", TextLoader)
                await cur.execute(self._sql["job_get"], {"id": job_id})
                rows = [_readable(r) for r in await cur.fetchall()]
        return _job(rows[0]) if rows else None

    def job_get_sync(self, conn: Connection[Any], job_id: int) -> Job | None:
        try:
            rows = _fetch_sync(conn, self._sql["job_get"], {"id": job_id})
        except UNREADABLE:  # as job_get
            with conn.cursor(row_factory=dict_row) as cur:
                cur.adapters.register_loader("jsonb", TextLoader)
                cur.execute(self._sql["job_get"], {"id": job_id})
                rows = [_readable(r) for r in cur.fetchall()]
        return _job(rows[0]) if rows else None

    async def job_events_list(self, conn: AsyncConnection[Any], job_id: int) -> list[JobEvent]:
        rows = await _fetch(conn, self._sql["job_events_list"], {"job_id": job_id})
        return [_event(r) for r in rows]

    def job_events_list_sync(self, conn: Connection[Any], job_id: int) -> list[JobEvent]:
        rows = _fetch_sync(conn, self._sql["job_events_list"], {"job_id": job_id})
        return [_event(r) for r in rows]

    async def queue_stats(
        self,
        conn: AsyncConnection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        now: datetime | None = None,
    ) -> list[QueueStateCount]:
        params = {"near_expiry_seconds": near_expiry_seconds, "now": now}
        rows = await _fetch(conn, self._sql["queue_stats"], params)
        return [QueueStateCount(**{**r, "state": JobState(r["state"])}) for r in rows]

    # -- the lease state machine ------------------------------------------------------------

    async def job_claim(
        self,
        conn: AsyncConnection[Any],
        *,
        queue: str,
        owner: str,
        limit: int,
        default_lease_seconds: float,
        default_runtime_seconds: float,
        policies: Sequence[TaskLeasePolicy] = (),
        tasks: Sequence[str] | None = None,
        oldest: int = 0,
        limited: bool = False,
        now: datetime | None = None,
    ) -> list[ClaimedJob]:
        """Claims up to `limit` due jobs of `queue`: the `oldest` oldest whatever their priority,
        the rest by priority. With `tasks`, only jobs of those tasks; None: any task.
        A `limited` queue is claimed within its limits, one claim at a time; the plain
        claim takes nothing from a limited queue."""
        oldest = max(0, min(oldest, limit))
        params = {
            "queue": queue,
            "owner": owner,
            "limit": limit,
            "oldest": oldest,
            "by_priority": limit - oldest,
            "tasks": None if tasks is None else list(tasks),
            "default_lease_seconds": default_lease_seconds,
            "default_runtime_seconds": default_runtime_seconds,
            "policy_tasks": [p.task for p in policies],
            # float8[]: psycopg refuses a list that mixes int and float, so make them one type.
            "policy_leases": [float(p.lease_seconds) for p in policies],
            "policy_runtimes": [float(p.max_runtime_seconds) for p in policies],
            "now": now,
        }
        if limited:
            params["window"] = max(LIMITED_CLAIM_WINDOW, 5 * limit)
            lock = {"lock_space": f"tenure.limit:{self.schema}", "queue": queue}
            # Pipelined: BEGIN, the lock and the claim go out together, in one round trip.
            async with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                await cur.execute(self._sql["limit_lock"], lock)
                rows, unreadable = await self._claim_rows(cur, "job_claim_limited", params)
        else:
            async with conn.cursor() as cur:
                rows, unreadable = await self._claim_rows(cur, "job_claim", params)
        if unreadable:
            await self._set_aside(conn, owner, unreadable)
        # Tuples in CLAIM_COLUMNS order: the claim is on every job's path, and a dict per row
        # costs more than the positions.
        rows.sort(key=itemgetter(0))
        return [
            ClaimedJob(
                id=job_id,
                queue=job_queue,
                task=task,
                payload=payload,
                priority=priority,
                attempt=attempt,
                max_attempts=max_attempts,
                lease=Lease(job_id, owner, token, expires_at, deadline),
                progress=progress,
                idempotency_key=idempotency_key,
                available_at=available_at,
                created_at=created_at,
                db_now=db_now,
                result_wanted=result_wanted,
                snoozes=snoozes,
                trace_context=trace_context,
            )
            for (
                job_id,
                job_queue,
                task,
                payload,
                priority,
                attempt,
                max_attempts,
                token,
                expires_at,
                deadline,
                progress,
                idempotency_key,
                available_at,
                created_at,
                result_wanted,
                snoozes,
                trace_context,
                db_now,
            ) in rows
        ]

    async def _claim_rows(
        self, cur: AsyncCursor[Any], name: str, params: dict[str, Any]
    ) -> tuple[list[Any], list[tuple[int, int, str]]]:
        """The claimed rows this client could read, and (id, token, why) of those it could not."""
        await cur.execute(self._sql[name], params)
        if name not in self._claim_columns_checked:  # the statement's text never changes
            _check_claim_columns(cur.description)
            self._claim_columns_checked.add(name)
        try:
            return await cur.fetchall(), []
        except UNREADABLE as exc:
            first = exc
        # One row's value cannot be read here (a payload nested deeper than Python's recursion
        # limit, written past the client's checks): read the rows one by one, so that the batch
        # beside it still runs, and name the ones that cannot be read from their raw id and token.
        result = cur.pgresult
        assert result is not None
        rows: list[Any] = []
        unreadable: list[tuple[int, int, str]] = []
        for i in range(result.ntuples):
            await cur.scroll(i, mode="absolute")
            try:
                rows.append(await cur.fetchone())
            except UNREADABLE as exc:
                job_id, token = (int(bytes(result.get_value(i, col) or b"0")) for col in (0, 7))
                unreadable.append((job_id, token, f"{type(exc).__name__}: {exc}"[:500] or str(first)))
        return rows, unreadable

    async def _set_aside(
        self, conn: AsyncConnection[Any], owner: str, unreadable: Sequence[tuple[int, int, str]]
    ) -> None:
        """Claimed jobs whose rows this client cannot read go dead alone, fenced like any failure."""
        for job_id, token, why in unreadable:
            log.warning("job %s cannot be read by this worker and is set aside as dead: %s", job_id, why)
            await self.job_fail(
                conn,
                job_id=job_id,
                owner=owner,
                token=token,
                error_code=UNREADABLE_ROW,
                error=f"this worker could not read the job's row, so it never ran: {why}",
                retry_delay=None,
            )

    def _complete_params(
        self,
        owner: str,
        leases: Sequence[tuple[int, int]],
        now: datetime | None,
        results: Mapping[tuple[int, int], Any] | None = None,
        notify_results: bool = True,
        repeat_is_done: bool = True,
    ) -> dict[str, Any]:
        ordered = sorted(leases)  # one lock order for every writer
        found = results or {}
        return {
            "ids": [i for i, _ in ordered],
            "tokens": [t for _, t in ordered],
            # NULL when no job has a result (the usual case): unnest pads it with NULLs, and no
            # array of nulls is built and sent.
            "results": [_result_json(found.get(lease)) for lease in ordered] if found else None,
            "results_channel": self.results_channel,
            "notify_results": notify_results,
            "repeat_is_done": repeat_is_done,
            "owner": owner,
            "now": now,
        }

    async def job_complete_many(
        self,
        conn: AsyncConnection[Any],
        *,
        owner: str,
        leases: Sequence[tuple[int, int]],
        results: Mapping[tuple[int, int], Any] | None = None,
        notify_results: bool = True,
        repeat_is_done: bool = True,
        now: datetime | None = None,
    ) -> dict[tuple[int, int], str]:
        """Fenced success for (job id, token) pairs: each pair's outcome, 'done', 'busy' (locked
        elsewhere, try again) or 'lost' (the fence did not hold). `results` holds each job's
        result (JSON, already checked; absent or None: none; Jsonb(None): JSON null). A job
        that already succeeded under the token is 'done' (a repeat after a lost reply) unless
        `repeat_is_done` is false (ctx.atomic, whose work must not commit beside it): 'lost'."""
        params = self._complete_params(owner, leases, now, results, notify_results, repeat_is_done)
        async with conn.cursor() as cur:
            await cur.execute(self._sql["job_complete_many"], params)
            return {(job_id, token): outcome for job_id, token, outcome in await cur.fetchall()}

    def job_complete_many_sync(
        self,
        conn: Connection[Any],
        *,
        owner: str,
        leases: Sequence[tuple[int, int]],
        results: Mapping[tuple[int, int], Any] | None = None,
        notify_results: bool = True,
        repeat_is_done: bool = True,
        now: datetime | None = None,
    ) -> dict[tuple[int, int], str]:
        params = self._complete_params(owner, leases, now, results, notify_results, repeat_is_done)
        rows = _fetch_sync(conn, self._sql["job_complete_many"], params)
        return {(r["id"], r["token"]): r["outcome"] for r in rows}

    async def job_snooze(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        owner: str,
        token: int,
        delay: float,
        max_snoozes: int,
        reason: str | None = None,
        now: datetime | None = None,
    ) -> FailOutcome:
        """Fenced snooze: 'snoozed' (to `state`: scheduled, pending, or dead past `max_snoozes`),
        'busy' or 'lost', as job_fail answers."""
        params = {
            "id": job_id,
            "owner": owner,
            "token": token,
            "delay": float(delay),
            "max_snoozes": max_snoozes,
            "reason": None if reason is None else storable_text(reason, 1000),
            "channel": self.channel,
            "results_channel": self.results_channel,
            "now": now,
        }
        r = (await _fetch(conn, self._sql["job_snooze"], params))[0]
        return FailOutcome(r["outcome"], JobState(r["state"]) if r["state"] else None, r["available_at"])

    async def job_result_set(
        self, conn: AsyncConnection[Any], *, job_id: int, token: int, result: Any
    ) -> bool:
        """Stores the result of a job completed by ctx.atomic under `token`; False when it is not
        that attempt's success, or a result is stored already."""
        params = {
            "id": job_id,
            "token": token,
            "result": Jsonb(result),
            "results_channel": self.results_channel,
        }
        return bool(await _fetch(conn, self._sql["job_result_set"], params))

    async def lease_check_many(
        self, conn: AsyncConnection[Any], *, owner: str, leases: Sequence[tuple[int, int]]
    ) -> list[Row]:
        """The (id, token) leases `owner` no longer holds, with the job's state and last error."""
        ordered = sorted(leases)
        params = {"ids": [i for i, _ in ordered], "tokens": [t for _, t in ordered], "owner": owner}
        return await _fetch(conn, self._sql["lease_check_many"], params)

    async def job_fail(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        owner: str,
        token: int,
        error_code: str,
        error: str,
        retry_delay: float | None,
        at_deadline: bool = False,
        now: datetime | None = None,
    ) -> FailOutcome:
        """Fenced failure. `at_deadline`: the job's max runtime ended it (see job_fail)."""
        params = {
            "id": job_id,
            "owner": owner,
            "token": token,
            "error_code": storable_text(error_code, 100),
            "error": storable_text(error, 2000),
            "retry_delay": retry_delay,
            "at_deadline": at_deadline,
            "now": now,
        }
        r = (await _fetch(conn, self._sql["job_fail"], params))[0]
        return FailOutcome(r["outcome"], JobState(r["state"]) if r["state"] else None, r["available_at"])

    async def lease_extend_many(
        self,
        conn: AsyncConnection[Any],
        *,
        owner: str,
        renewals: Sequence[tuple[int, int, Any, float]],
        now: datetime | None = None,
    ) -> list[LeaseExtension]:
        """Renews (job id, token, progress, lease seconds) where progress moved."""
        ordered = sorted(renewals, key=lambda r: r[0])
        params = {
            "ids": [r[0] for r in ordered],
            "tokens": [r[1] for r in ordered],
            "progress": [Jsonb(r[2]) for r in ordered],
            "lease_seconds": [r[3] for r in ordered],
            "owner": owner,
            "now": now,
        }
        rows = await _fetch(conn, self._sql["lease_extend_many"], params)
        return [LeaseExtension(r["id"], r["lease_token"], r["lease_expires_at"], r["db_now"]) for r in rows]

    async def lease_release_many(
        self,
        conn: AsyncConnection[Any],
        *,
        owner: str,
        leases: Sequence[tuple[int, int]],
        now: datetime | None = None,
    ) -> list[int]:
        params = {**self._complete_params(owner, leases, now), "channel": self.channel}
        return [r["id"] for r in await _fetch(conn, self._sql["lease_release_many"], params)]

    async def fencing_lost_record(
        self, conn: AsyncConnection[Any], *, job_id: int, token: int, owner: str, error_code: str
    ) -> None:
        params = {"id": job_id, "token": token, "owner": owner, "error_code": error_code}
        await _fetch(conn, self._sql["fencing_lost_record"], params)

    async def session_reset(self, conn: AsyncConnection[Any]) -> None:
        """Undoes session settings a handler's unit of work may have made (SET ...)."""
        await _fetch(conn, self._sql["session_reset"], {})

    def session_reset_sync(self, conn: Connection[Any]) -> None:
        _fetch_sync(conn, self._sql["session_reset"], {})

    async def lease_lost_record(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        token: int,
        owner: str,
        error_code: str,
        error: str,
    ) -> None:
        params = {
            "id": job_id,
            "token": token,
            "owner": owner,
            "error_code": storable_text(error_code, 100),
            "error": storable_text(error, 2000),
        }
        await _fetch(conn, self._sql["lease_lost_record"], params)

    async def lease_get(
        self, conn: AsyncConnection[Any], job_id: int, now: datetime | None = None
    ) -> Row | None:
        rows = await _fetch(conn, self._sql["lease_get"], {"id": job_id, "now": now})
        return rows[0] if rows else None

    async def lease_recover_expired(
        self,
        conn: AsyncConnection[Any],
        *,
        limit: int,
        backoff_base: float,
        backoff_cap: float,
        jitter: float,
        policies: Sequence[TaskBackoffPolicy] = (),
        now: datetime | None = None,
    ) -> list[RecoveredLease]:
        params = {
            "limit": limit,
            "backoff_base": backoff_base,
            "backoff_cap": backoff_cap,
            "jitter": jitter,
            "policy_tasks": [p.task for p in policies],
            "policy_bases": [float(p.base) for p in policies],
            "policy_caps": [float(p.cap) for p in policies],
            "policy_jitters": [float(p.jitter) for p in policies],
            "now": now,
        }
        rows = await _fetch(conn, self._sql["lease_recover_expired"], params)
        return [
            RecoveredLease(
                r["id"],
                JobState(r["state"]),
                r["lease_owner"],
                r["lease_token"],
                r["queue"],
                r["available_at"],
            )
            for r in rows
        ]

    async def job_promote_due(
        self, conn: AsyncConnection[Any], *, limit: int, now: datetime | None = None
    ) -> Promotion:
        """Moves up to `limit` due scheduled jobs to pending, notifying their queues."""
        params = {"limit": limit, "channel": self.channel, "now": now}
        [row] = await _fetch(conn, self._sql["job_promote_due"], params)
        return Promotion(int(row["promoted"]), row["next_due"], row["db_now"])


_RACE = (
    f"the job's unique key was held when it was inserted and free when its holder was looked up, "
    f"{INSERT_ROUNDS} times in a row: its holders finish as fast as it is enqueued; try again"
)


def _holder_params(insert: dict[str, Any], key: uuid.UUID) -> dict[str, Any]:
    """job_find_holder's parameters for the one job of `insert` (job_insert_many's)."""
    return {
        "idempotency_key": key,
        "unique_key": insert["unique_keys"][0],
        "unique_period": insert["unique_periods"][0],
        "now": insert["now"],
    }


def _held_key(insert: dict[str, Any]) -> str | None:
    """The unique key of the one job of `insert`, as `tenure unique show` takes it (a period's
    window number, which the database's clock decides, is stored after it as '@N')."""
    key: str | None = insert["unique_keys"][0]
    return key


def _existing(row: Row, key: uuid.UUID, unique_key: str | None) -> EnqueuedJob:
    # Found by its unique key, the job has an idempotency key of its own, not ours to read.
    return EnqueuedJob(
        row["id"], key if row["by_idempotency_key"] else None, row["available_at"], True, unique_key
    )


def _unique_params(specs: Sequence[JobSpec]) -> dict[str, list[Any]]:
    """Each spec's unique key (before its period's window is appended), scope and period."""
    keys: list[str | None] = []
    parts: list[str | None] = []
    states: list[str | None] = []
    periods: list[float | None] = []
    for spec in specs:
        unique = unique_from(spec.unique)
        if unique is None:
            keys.append(None)
            parts.append(None)
            states.append(None)
            periods.append(None)
            continue
        part = unique.part_for(spec.task, spec.payload)
        parts.append(part)
        keys.append(held_key(spec.task, part))
        states.append("{" + ",".join(sorted(s.value for s in unique.states)) + "}")
        periods.append(None if unique.period is None else float(unique.period))
    return {"unique_keys": keys, "unique_parts": parts, "unique_states": states, "unique_periods": periods}


def _result_json(result: Any) -> Jsonb | None:
    """None stores no result (SQL NULL); a Jsonb as given (Jsonb(None) is JSON null)."""
    if result is None or isinstance(result, Jsonb):
        return result
    return Jsonb(result)


def results_channel(schema: str) -> str:
    """The channel job results are announced on (payload: the job id), apart from the workers'
    channel, so callers waiting for results never wake a worker."""
    return f"tenure.results:{schema}"[:63]


def payload_json(payload: dict[str, Any]) -> str:
    """The exact JSON text Tenure stores for a payload (used by COPY)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)

"""The only place SQL meets Python: one typed function per named query.

Queries are loaded once per schema from the .sql files beside this module. Every function
takes ``now``: None means the database clock, a datetime lets tests move time without sleeping.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.types.json import Jsonb

from tenure.db.adapters import decode_jsonb
from tenure.db.arrays import bigint_array, float8_array, text_array
from tenure.db.fetch import fetch, fetch_as
from tenure.db.handler_queries import HandlerQueries
from tenure.db.job_rows import UNREADABLE, UNREADABLE_ROW
from tenure.db.producer_queries import ProducerQueries
from tenure.db.text import storable_text
from tenure.model.jobs import (
    ClaimedJob,
    JobState,
    Lease,
)
from tenure.model.secrets import SECRET_KEY, has_secret_refs

log = logging.getLogger("tenure.worker")


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
    #: Waiting jobs whose wait reached its deadline in the same pass (waits_expire_due).
    waits_timed_out: int = 0


@dataclass(frozen=True, slots=True)
class WorkflowWork:
    """One chunk of the workflow pass: the work's kind (release, propagate, materialize), its
    workflow and step, and its outcome: 'done' (that work is finished), 'more' (it goes on in the
    next chunk) or 'busy' (a step row was locked elsewhere: it is tried again in a second)."""

    kind: str
    workflow_id: int
    step: str
    outcome: str


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
class LeaseGone:
    """A lease (job id, token) its worker no longer holds, and what the job is now: `current_token`
    and `state` are None when the job is gone."""

    id: int
    token: int
    state: str | None
    current_token: int | None
    last_error_code: str | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    """A job's lease as the database sees it at `db_now`: why a fenced write was refused."""

    id: int
    state: str
    lease_owner: str | None
    lease_token: int
    lease_expires_at: datetime | None
    lease_deadline: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class QueueStateCount:
    queue: str
    state: JobState
    jobs: int
    oldest_claimable_at: datetime | None
    leases_near_expiry: int
    db_now: datetime


#: The columns both claim statements return, in order: ClaimedJob's fields, but the lease's
#: (token, expiry, deadline) in place of its `lease`.
CLAIM_COLUMNS = (
    "id", "queue", "task", "payload", "priority", "attempt_count", "max_attempts", "lease_token",
    "lease_expires_at", "lease_deadline", "progress", "idempotency_key", "available_at",
    "created_at", "db_now", "result_wanted", "snoozes", "trace_context",
)  # fmt: skip


def _check_claim_columns(description: Sequence[Any] | None) -> None:
    if description is not None and tuple(c.name for c in description) != CLAIM_COLUMNS:
        raise RuntimeError(f"the claim returned columns {[c.name for c in description]}, not {CLAIM_COLUMNS}")


#: Makes a named tuple from its fields without the Python frame of its generated constructor.
_new_tuple = tuple.__new__


#: How a secret reference's key shows in jsonb's text: jsonb escapes neither `$` nor letters, so
#: a payload whose text lacks it holds no reference, and is not walked to find one.
_SECRET_KEY_TEXT = json.dumps(SECRET_KEY)


def claimed_job(row: Sequence[Any], owner: str) -> ClaimedJob:
    """A claimed row (CLAIM_COLUMNS) as the job a worker runs: the payload decoded from its text,
    the lease's three columns become its `lease`; the columns after them fill ClaimedJob's
    fields after `lease`, in order, and `secret_refs` is found last. Raises one of UNREADABLE
    for a payload this client cannot decode."""
    job_id, queue, task, text, priority, attempt, max_attempts, token, expires_at, deadline, *rest = row
    payload = decode_jsonb(text)
    # The text is searched in C; the decoded value is walked in Python only when its text names
    # the key (for a payload of a few hundred values, the walk cost more than the decoding).
    secret_refs = _SECRET_KEY_TEXT in text and has_secret_refs(payload)
    lease = _new_tuple(Lease, (job_id, owner, token, expires_at, deadline))
    fields = (job_id, queue, task, payload, priority, attempt, max_attempts, lease, *rest, secret_refs)
    return _new_tuple(ClaimedJob, fields)


@functools.lru_cache(maxsize=64)
def _claim_arrays(
    tasks: tuple[str, ...] | None, policies: tuple[TaskLeasePolicy, ...]
) -> dict[str, str | None]:
    """The claim's array parameters in PostgreSQL's text form (tenure.db.arrays), made once for a
    worker's terms: they are the same at every claim it makes."""
    return {
        "tasks": None if tasks is None else text_array(tasks),
        "policy_tasks": text_array(p.task for p in policies),
        "policy_leases": float8_array(p.lease_seconds for p in policies),
        "policy_runtimes": float8_array(p.max_runtime_seconds for p in policies),
    }


#: The fewest due jobs a limited claim looks at to find ones whose keys have room.
LIMITED_CLAIM_WINDOW = 100


class Queries(ProducerQueries, HandlerQueries):
    """Typed access to the named queries of one Tenure schema: the producer's, and the worker's."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self._claim_columns_checked: set[str] = set()

    async def task_policies_declare(
        self, conn: AsyncConnection[Any], tasks: Sequence[Mapping[str, Any]], declared_by: str
    ) -> None:
        """Records what enqueue() completes each task's jobs from: dicts of task, queue, priority,
        max_attempts and, for a unique task, unique_fields or unique_whole, unique_states and
        unique_period."""
        if tasks:
            params = {"tasks": json.dumps(list(tasks)), "declared_by": storable_text(declared_by, 200)}
            await fetch(conn, self._sql["task_policies_declare"], params)

    # -- inspection and operators -----------------------------------------------------------

    async def queue_stats(
        self,
        conn: AsyncConnection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        now: datetime | None = None,
    ) -> list[QueueStateCount]:
        params = {"near_expiry_seconds": near_expiry_seconds, "now": now}
        rows = await fetch(conn, self._sql["queue_stats"], params)
        return [QueueStateCount(**{**r, "state": JobState(r["state"])}) for r in rows]

    # -- the lease state machine ------------------------------------------------------------

    async def jobs_pages(self, conn: AsyncConnection[Any]) -> int:
        """The jobs table's size in pages now (a kept connection's statements are planned again
        when it has grown: tenure.worker.kept_connection)."""
        return int((await fetch(conn, self._sql["jobs_pages"], {}))[0]["pages"])

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
        only: Sequence[int] | None = None,
        now: datetime | None = None,
        cursor: AsyncCursor[Any] | None = None,
    ) -> list[ClaimedJob]:
        """Claims up to `limit` due jobs of `queue`: the `oldest` oldest whatever their priority,
        the rest by priority. With `tasks`, only jobs of those tasks; None: any task. With
        `only`, only those jobs (tenure.testing runs a chosen one).
        A `limited` queue is claimed within its limits, one claim at a time; the plain
        claim takes nothing from a limited queue. `cursor`: one of `conn`'s that the caller uses
        again from claim to claim (tenure.worker.kept_connection), closed here after a claim of
        more than one job; else the claim makes its own."""
        # Without an oldest share asked for, the by-priority lane alone: the same jobs, less to run.
        # (Asked for, not granted: a claim of no jobs that asks for one runs the two-lane form,
        # which is how a new connection warms both.)
        plain_claim = "job_claim" if oldest > 0 else "job_claim_by_priority"
        oldest = max(0, min(oldest, limit))
        params = {
            "queue": queue,
            "owner": owner,
            "limit": limit,
            "oldest": oldest,
            "by_priority": limit - oldest,
            "only": None if only is None else bigint_array(only),
            "default_lease_seconds": default_lease_seconds,
            "default_runtime_seconds": default_runtime_seconds,
            "now": now,
            **_claim_arrays(None if tasks is None else tuple(tasks), tuple(policies)),
        }
        if limited:
            params["window"] = max(LIMITED_CLAIM_WINDOW, 5 * limit)
            lock = {"lock_space": f"tenure.limit:{self.schema}", "queue": queue}
            # Pipelined: BEGIN, the lock and the claim go out together, in one round trip.
            async with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                await cur.execute(self._sql["limit_lock"], lock)
                rows, unreadable = await self._claim_rows(cur, "job_claim_limited", params)
        elif cursor is not None:
            rows, unreadable = await self._claim_rows(cursor, plain_claim, params)
            if len(rows) + len(unreadable) > 1:
                # A cursor keeps its result until its next statement: the rows of a batch, each
                # with its payload, would be held until the next claim. Closed, it is made again.
                await cursor.close()
        else:
            async with conn.cursor() as cur:
                rows, unreadable = await self._claim_rows(cur, plain_claim, params)
        # Tuples in CLAIM_COLUMNS order: the claim is on every job's path, and a dict per row
        # costs more than the positions.
        rows.sort(key=itemgetter(0))
        return await self._claimed(conn, owner, rows, unreadable)

    async def jobs_handed_unheard(
        self, conn: AsyncConnection[Any], *, owner: str, known: Sequence[int]
    ) -> list[ClaimedJob]:
        """Jobs handed to `owner` (handoff.sql) whose notification it did not hear: running under
        its lease at their first token, other than `known` (the ones it runs). As a claim gives them."""
        async with conn.cursor() as cur:
            params = {"owner": owner, "known": bigint_array(known)}
            rows, unreadable = await self._claim_rows(cur, "jobs_handed_unheard", params)
        return await self._claimed(conn, owner, rows, unreadable)

    async def _claimed(
        self,
        conn: AsyncConnection[Any],
        owner: str,
        rows: Sequence[Sequence[Any]],
        unreadable: list[tuple[int, int, str]],
    ) -> list[ClaimedJob]:
        """The jobs of claimed rows; those whose payload this client cannot read set aside."""
        jobs = []
        for row in rows:
            try:
                jobs.append(claimed_job(row, owner))
            except UNREADABLE as exc:  # its payload alone: the rest of the batch runs
                unreadable.append((row[0], row[7], f"{type(exc).__name__}: {exc}"[:500]))
        if unreadable:
            await self.set_aside(conn, owner, unreadable)
        return jobs

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

    async def set_aside(
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
        r = (await fetch(conn, self._sql["job_snooze"], params))[0]
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
        return bool(await fetch(conn, self._sql["job_result_set"], params))

    async def lease_check_many(
        self, conn: AsyncConnection[Any], *, owner: str, leases: Sequence[tuple[int, int]]
    ) -> list[LeaseGone]:
        """The (id, token) leases `owner` no longer holds, with the job's state and last error."""
        ordered = sorted(leases)
        params = {"ids": [i for i, _ in ordered], "tokens": [t for _, t in ordered], "owner": owner}
        return await fetch_as(conn, LeaseGone, self._sql["lease_check_many"], params)

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
        r = (await fetch(conn, self._sql["job_fail"], params))[0]
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
        rows = await fetch(conn, self._sql["lease_extend_many"], params)
        return [LeaseExtension(r["id"], r["lease_token"], r["lease_expires_at"], r["db_now"]) for r in rows]

    async def lease_release_many(
        self,
        conn: AsyncConnection[Any],
        *,
        owner: str,
        leases: Sequence[tuple[int, int]],
        reason: str = "SHUTDOWN",
        now: datetime | None = None,
    ) -> list[int]:
        """Gives the jobs back, pending at once with their attempt not counted; `reason` is the
        error code their 'released' events carry."""
        params = {**self._complete_params(owner, leases, now), "channel": self.channel, "reason": reason}
        return [r["id"] for r in await fetch(conn, self._sql["lease_release_many"], params)]

    async def fencing_lost_record(
        self, conn: AsyncConnection[Any], *, job_id: int, token: int, owner: str, error_code: str
    ) -> None:
        params = {"id": job_id, "token": token, "owner": owner, "error_code": error_code}
        await fetch(conn, self._sql["fencing_lost_record"], params)

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
        await fetch(conn, self._sql["lease_lost_record"], params)

    async def lease_get(
        self, conn: AsyncConnection[Any], job_id: int, now: datetime | None = None
    ) -> LeaseSeen | None:
        rows = await fetch_as(conn, LeaseSeen, self._sql["lease_get"], {"id": job_id, "now": now})
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
        rows = await fetch(conn, self._sql["lease_recover_expired"], params)
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

    async def workflow_work_run(self, conn: AsyncConnection[Any], *, chunk: int) -> WorkflowWork | None:
        """Does one chunk of the oldest due workflow work (at most `chunk` steps), in `conn`'s
        transaction; None when none is due."""
        rows = await fetch(conn, self._sql["workflow_work_run"], {"chunk": chunk})
        if not rows:
            return None
        row = rows[0]
        return WorkflowWork(row["kind"], row["workflow_id"], row["step"], row["outcome"])

    async def job_promote_due(
        self, conn: AsyncConnection[Any], *, limit: int, now: datetime | None = None
    ) -> Promotion:
        """Moves up to `limit` due scheduled jobs to pending, notifying their queues."""
        params = {"limit": limit, "channel": self.channel, "now": now}
        [row] = await fetch(conn, self._sql["job_promote_due"], params)
        return Promotion(int(row["promoted"]), row["next_due"], row["db_now"])

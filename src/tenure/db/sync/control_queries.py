# Generated from src/tenure/db/control_queries.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Typed access to the job-control queries (control.sql): cancel and revoke, retry now, queue
pauses, and what a caller waiting for a result reads. Written once, async; tools/async_to_sync.py
writes its blocking twin (tenure.db.sync.control_queries), which the blocking client runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.types.json import Jsonb

from tenure.db.channels import REVOKE_PREFIX, notify_channel, results_channel
from tenure.db.control_rows import (
    CANCELLABLE,
    NO_FILTER,
    QUEUED,
    CancelFilter,
    ControlRows,
    JobResultRow,
    LimitInEffect,
    PauseInEffect,
    PauseOutcome,
    ResumeOutcome,
    SkippedJob,
    UniqueKeyJob,
    split_rows,
)
from tenure.db.sqlfiles import named_queries
from tenure.db.sync.fetch import fetch, fetch_as
from tenure.db.text import storable_text
from tenure.model.jobs import JobState
from tenure.model.limits import QueueLimit

#: The event code of a keyed job skipped so that its key moves on.
ORDERING_SKIP = "ORDERING_SKIP"


class ControlQueries:
    def __init__(self, schema: str) -> None:
        self._sql = named_queries(schema)
        self.channel = notify_channel(schema)
        self.results_channel = results_channel(schema)

    def _cancel_params(
        self,
        ids: Sequence[int] | None,
        where: CancelFilter,
        *,
        requeue: bool,
        max_jobs: int,
        actor: str,
        reason: str,
        now: datetime | None,
    ) -> dict[str, Any]:
        if requeue:
            accept: Sequence[JobState] = (JobState.RUNNING,)
        elif ids is not None:
            accept = CANCELLABLE
        else:
            accept = (*QUEUED, JobState.RUNNING) if where.running else QUEUED
        return {
            "keyed": False,
            "event_code": None,
            "ids": None if ids is None else sorted(set(ids)),
            "accept": [s.value for s in accept],
            "queue": where.queue,
            "task": where.task,
            "contains": None if where.contains is None else Jsonb(where.contains),
            "older_than": where.older_than,
            "requeue": requeue,
            "max_jobs": max_jobs,
            "actor": storable_text(actor, 200),
            "reason": storable_text(reason, 2000),
            "channel": self.channel,
            "results_channel": self.results_channel,
            "revoke_prefix": REVOKE_PREFIX,
            "now": now,
        }

    def cancel_many(
        self,
        conn: Connection[Any],
        ids: Sequence[int] | None,
        where: CancelFilter = NO_FILTER,
        *,
        requeue: bool = False,
        max_jobs: int,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> ControlRows:
        """Cancels (or, with `requeue`, gives back) the jobs named or matched; all or nothing."""
        params = self._cancel_params(
            ids, where, requeue=requeue, max_jobs=max_jobs, actor=actor, reason=reason, now=now
        )
        return split_rows(fetch(conn, self._sql["job_cancel_many"], params))

    def skip_ordering_head(
        self, conn: Connection[Any], job_id: int, *, actor: str, reason: str, now: datetime | None = None
    ) -> SkippedJob | None:
        """Cancels a keyed job that holds up its key (dead, pending or scheduled; never a running
        one), so the key moves on: job_cancel_many's transition, its event marked ORDERING_SKIP.
        The cancelled job and its key, or None when it is no such job."""
        params = self._cancel_params(
            [job_id], NO_FILTER, requeue=False, max_jobs=1, actor=actor, reason=reason, now=now
        )
        params.update(
            accept=[s.value for s in (*QUEUED, JobState.DEAD)], keyed=True, event_code=ORDERING_SKIP
        )
        rows = fetch(conn, self._sql["job_cancel_many"], params)
        skipped = [SkippedJob(r["id"], r["ordering_key"]) for r in rows if r["outcome"] == "moved"]
        return skipped[0] if skipped else None

    def _retry_params(
        self, ids: Sequence[int], attempts: int, actor: str, reason: str, now: datetime | None
    ) -> dict[str, Any]:
        return {
            "ids": sorted(set(ids)),
            "attempts": attempts,
            "actor": storable_text(actor, 200),
            "reason": storable_text(reason, 2000),
            "channel": self.channel,
            "now": now,
        }

    def retry_many(
        self,
        conn: Connection[Any],
        ids: Sequence[int],
        *,
        attempts: int,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> ControlRows:
        """Runs waiting jobs now and reprocesses dead or cancelled ones; all or nothing."""
        params = self._retry_params(ids, attempts, actor, reason, now)
        return split_rows(fetch(conn, self._sql["job_retry_many"], params))

    def _pause_params(
        self,
        queue: str,
        until: datetime | None,
        actor: str,
        reason: str,
        allow_unknown: bool,
        now: datetime | None,
    ) -> dict[str, Any]:
        return {
            "queue": queue,
            "until": until,
            "actor": storable_text(actor, 200),
            "reason": storable_text(reason, 2000),
            "allow_unknown": allow_unknown,
            "now": now,
        }

    def pause(
        self,
        conn: Connection[Any],
        queue: str,
        *,
        until: datetime | None,
        actor: str,
        reason: str,
        allow_unknown: bool = False,
        now: datetime | None = None,
    ) -> PauseOutcome:
        """Pauses `queue` cluster-wide: whether the queue was known (else nothing was written)
        and, when paused, since and until when."""
        params = self._pause_params(queue, until, actor, reason, allow_unknown, now)
        return PauseOutcome(**(fetch(conn, self._sql["queue_pause"], params))[0])

    def _resume_params(
        self, queue: str, actor: str, reason: str | None, now: datetime | None
    ) -> dict[str, Any]:
        return {
            "queue": queue,
            "actor": storable_text(actor, 200),
            "reason": None if reason is None else storable_text(reason, 2000),
            "channel": self.channel,
            "now": now,
        }

    def resume(
        self,
        conn: Connection[Any],
        queue: str,
        *,
        actor: str,
        reason: str | None,
        now: datetime | None = None,
    ) -> ResumeOutcome | None:
        """Ends `queue`'s pause; None when it was not paused."""
        rows = fetch(conn, self._sql["queue_resume"], self._resume_params(queue, actor, reason, now))
        return ResumeOutcome(**rows[0]) if rows else None

    def pauses(self, conn: Connection[Any], now: datetime | None = None) -> list[PauseInEffect]:
        """The pauses in effect, by queue."""
        return fetch_as(conn, PauseInEffect, self._sql["queue_pauses_list"], {"now": now})

    def db_now(self, conn: Connection[Any]) -> datetime:
        """The database's clock (the transaction's start, inside one): what relative times are
        measured against, whatever the caller's clock says."""
        return (fetch(conn, self._sql["clock_now"], {}))[0]["now"]  # type: ignore[no-any-return]

    def declare_limit(self, conn: Connection[Any], limit: QueueLimit, declared_by: str) -> None:
        params = {
            "queue": limit.queue,
            "max_running": limit.max_running,
            "key_field": limit.key,
            "max_running_per_key": limit.max_running_per_key,
            "rate": limit.rate,
            "per_seconds": None if limit.rate is None else float(limit.per),
            "declared_by": storable_text(declared_by, 200),
        }
        fetch(conn, self._sql["queue_limit_declare"], params)

    def clear_limit(self, conn: Connection[Any], queue: str) -> bool:
        return bool(fetch(conn, self._sql["queue_limit_clear"], {"queue": queue}))

    def limits(self, conn: Connection[Any]) -> list[LimitInEffect]:
        """Every limited queue with its limits and the live leases it holds now."""
        return fetch_as(conn, LimitInEffect, self._sql["queue_limits_list"], {})

    def unique_key_jobs(self, conn: Connection[Any], key: str, limit: int = 20) -> list[UniqueKeyJob]:
        """The jobs stored with unique key `key` (any period window), newest first."""
        return fetch_as(conn, UniqueKeyJob, self._sql["unique_key_jobs"], {"key": key, "limit": limit})

    def result(self, conn: Connection[Any], job_id: int) -> JobResultRow | None:
        """What a caller waiting for the job reads of it; None when there is no such job."""
        rows = fetch(conn, self._sql["job_result_get"], {"id": job_id})
        return JobResultRow(**rows[0]) if rows else None

    def unreleased_step(self, conn: Connection[Any], job_id: int) -> str | None:
        """The state of the workflow step this job id was drawn for while its job does not exist
        yet (waiting, held or cancelled); None otherwise, or on a schema without workflows or for
        a role that may not read them."""
        try:
            with conn.transaction():
                rows = fetch(conn, self._sql["workflow_step_unreleased"], {"id": job_id})
        except (psycopg.errors.UndefinedTable, psycopg.errors.InsufficientPrivilege):
            return None
        return str(rows[0]["state"]) if rows else None

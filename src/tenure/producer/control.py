"""The operator's verbs on jobs and queues: what they accept, and how a refusal reads.

Every verb is one guarded statement (db/sql/control.sql) that changes all it was asked to or
nothing; this module checks the input before anything is sent and turns a refusal into an
error that names each job and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tenure.db.control_rows import CancelFilter, ControlRows, NamedJob, PauseInEffect
from tenure.model.errors import TenureError, ValidationError
from tenure.model.validation import MAX_ATTEMPTS_LIMIT, check_queue

MAX_REASON_CHARS = 2000
#: The most jobs one cancel by filter takes unless the caller raises the bound.
DEFAULT_MAX_JOBS = 100


class ControlRefused(TenureError):
    """An operator's verb was refused as a whole: nothing was changed. The message says why."""


class NothingMatched(ControlRefused):
    """A filter matched no job."""


class TooManyMatched(ControlRefused):
    """A filter matched more jobs than the stated bound."""


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What a cancel did. `revoked`: running jobs whose lease ended (cancelled, or with
    `requeue` pending again under a new token); `cancelled`: waiting or dead jobs."""

    cancelled: list[int]
    revoked: list[int]
    requeue: bool

    @property
    def ids(self) -> list[int]:
        """Every job the cancel changed, sorted."""
        return sorted(self.cancelled + self.revoked)


@dataclass(frozen=True, slots=True)
class QueuePause:
    """A queue's pause: since when, until when (None: until resumed), by whom and why."""

    queue: str
    paused_at: datetime
    until: datetime | None
    actor: str
    reason: str


def check_reason(reason: str | None, verb: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise ValidationError(f"a reason is required to {verb}: say why (it is kept in the history)")
    if len(text) > MAX_REASON_CHARS:
        raise ValidationError(f"the reason is {len(text)} characters; keep it under {MAX_REASON_CHARS}")
    return text


def check_ids(ids: Sequence[int]) -> list[int]:
    for job_id in ids:
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
            raise ValidationError(f"job ids are positive integers, got {job_id!r}")
    return sorted(set(ids))


def check_attempts(attempts: int) -> None:
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
        raise ValidationError(
            f"attempts is the number of fresh attempts a dead or cancelled job gets: an integer from 1 "
            f"to {MAX_ATTEMPTS_LIMIT}, got {attempts!r}"
        )


def check_cancel(
    ids: Sequence[int] | None, where: CancelFilter, *, requeue: bool, max_jobs: int | None
) -> tuple[list[int] | None, int]:
    """The ids (None: by filter) and the bound, checked; raises before anything is written."""
    has_filter = any(v is not None for v in (where.queue, where.task, where.contains, where.older_than))
    if ids is not None and not ids:
        ids = None
    if ids is not None and has_filter:
        raise ValidationError("give job ids or a filter (queue, task, contains, older_than), not both")
    if ids is None and not has_filter:
        raise ValidationError(
            "name the jobs to cancel: job ids, or a filter (queue, task, contains, older_than)"
        )
    if where.queue is not None:
        check_queue(where.queue)
    if where.contains is not None and not isinstance(where.contains, dict):
        raise ValidationError(f"contains must be a JSON object (a dict), got {type(where.contains).__name__}")
    if where.older_than is not None and not (
        isinstance(where.older_than, int | float) and where.older_than >= 0
    ):
        raise ValidationError(f"older_than must be seconds >= 0, got {where.older_than!r}")
    if requeue and ids is None and not where.running:
        raise ValidationError("requeue gives back running jobs: with a filter, pass running=True too")
    checked = None if ids is None else check_ids(ids)
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise ValidationError(f"max_jobs must be an integer >= 1 or None (no bound), got {max_jobs!r}")
    bound = len(checked) if checked is not None else (max_jobs if max_jobs is not None else 2**31 - 2)
    return checked, bound


def cancel_report(rows: ControlRows, *, requeue: bool, max_jobs: int, by_filter: bool) -> CancelReport:
    """The report of a cancel, or the error that says why nothing was changed."""
    if rows.refused:
        raise ControlRefused(_refusals(rows.refused, requeue) + "; nothing was cancelled")
    if rows.too_many:
        raise TooManyMatched(
            f"more than {max_jobs} jobs match; nothing was cancelled. Narrow the filter, or raise "
            "the bound (max_jobs=..., or --yes on the command line)"
        )
    if by_filter and not rows.moved:
        raise NothingMatched("no job matches the filter; nothing was cancelled")
    running = [r.id for r in rows.moved if r.from_state == "running"]
    waiting = [r.id for r in rows.moved if r.from_state != "running"]
    return CancelReport(cancelled=waiting, revoked=running, requeue=requeue)


def _refusals(refused: list[NamedJob], requeue: bool) -> str:
    parts = []
    for r in refused:
        state = r.from_state
        if state is None:
            parts.append(f"there is no job {r.id}")
        elif requeue:
            parts.append(
                f"job {r.id} is {state}: requeue gives back running jobs only (retry runs a waiting job now)"
            )
        else:
            parts.append(f"job {r.id} is {state}, which is finished")
    return "; ".join(parts)


def retry_report(rows: ControlRows) -> list[int]:
    if rows.refused:
        parts = []
        for r in rows.refused:
            state = r.from_state
            if state is None:
                parts.append(f"there is no job {r.id}")
            elif state == "running":
                parts.append(f"job {r.id} is running (cancel it with requeue to give it back)")
            else:
                parts.append(f"job {r.id} is {state}: it needs no retry")
        raise ControlRefused("; ".join(parts) + "; nothing was retried")
    return [r.id for r in rows.moved]


def pause_until(
    until: datetime | timedelta | float | None, db_now: datetime | None = None
) -> datetime | None:
    """When a pause ends: a time, or a duration from now; None: until resumed."""
    if until is None:
        return None
    if isinstance(until, datetime):
        if until.tzinfo is None:
            raise ValidationError(
                f"until must be timezone-aware (e.g. {datetime.now(UTC).isoformat()}), got {until}"
            )
        at = until
    elif isinstance(until, timedelta):
        at = (db_now or datetime.now(UTC)) + until
    elif isinstance(until, int | float) and not isinstance(until, bool):
        at = (db_now or datetime.now(UTC)) + timedelta(seconds=until)
    else:
        raise ValidationError(f"until must be a datetime, a timedelta or seconds, got {until!r}")
    if at <= (db_now or datetime.now(UTC)):
        raise ValidationError(
            f"until ({at.isoformat()}) is not in the future; the pause would end before it began"
        )
    return at


def key_held(exc: Exception, verb: str) -> ControlRefused:
    """A job brought back to waiting would share its unique key with a job that holds it now."""
    detail = getattr(getattr(exc, "diag", None), "message_detail", None) or ""
    return ControlRefused(
        f"a job named would hold a unique key another job holds now ({detail.strip() or exc}); "
        f"cancel or finish that job first. Nothing was {verb}"
    )


def unknown_queue(queue: str) -> ControlRefused:
    return ControlRefused(
        f"no job was ever enqueued to queue {queue!r} and no worker serves it: check the name "
        "(`tenure queues list` shows the queues), or pass allow_unknown=True (--allow-unknown) to "
        "pause a queue before its first job; nothing was paused"
    )


def not_paused(queue: str) -> ControlRefused:
    return ControlRefused(f"queue {queue!r} is not paused; nothing was resumed")


def queue_pause(row: PauseInEffect) -> QueuePause:
    return QueuePause(row.queue, row.paused_at, row.until, row.actor, row.reason)

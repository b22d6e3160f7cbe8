"""What the job-control statements take and give: which jobs a cancel by filter matches, and what
a statement moved or refused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenure.db.fetch import Row
from tenure.model.jobs import JobState

#: States a cancel by filter takes (jobs not yet running, and jobs waiting for a signal or a
#: time), and those an id may be in to be cancelled.
QUEUED = (JobState.SCHEDULED, JobState.PENDING, JobState.WAITING)


CANCELLABLE = (JobState.SCHEDULED, JobState.PENDING, JobState.RUNNING, JobState.WAITING, JobState.DEAD)


@dataclass(frozen=True, slots=True)
class CancelFilter:
    """Which jobs a cancel by filter takes; None fields match anything."""

    queue: str | None = None
    task: str | None = None
    contains: dict[str, Any] | None = None
    """Jobs whose payload contains this JSON object (jsonb @>)."""
    older_than: float | None = None
    """Jobs enqueued at least this many seconds ago."""
    running: bool = False
    """Also revoke running jobs that match (a filter takes waiting jobs only by default)."""


#: A filter that leaves nothing out (a cancel by ids alone).
NO_FILTER = CancelFilter()


@dataclass(frozen=True, slots=True)
class NamedJob:
    """A job a control statement named or matched, and the state it was in: the state it moved
    from, or, refused, the state that kept it (None: there is no such job)."""

    id: int
    from_state: str | None


@dataclass(frozen=True, slots=True)
class ControlRows:
    """What one control statement did: the jobs it moved, or why it moved none."""

    moved: list[NamedJob]
    refused: list[NamedJob]
    too_many: bool


def split_rows(rows: list[Row]) -> ControlRows:
    def named(outcome: str) -> list[NamedJob]:
        return [NamedJob(r["id"], r["from_state"]) for r in rows if r["outcome"] == outcome]

    return ControlRows(
        moved=named("moved"), refused=named("refused"), too_many=any(r["outcome"] == "too_many" for r in rows)
    )


@dataclass(frozen=True, slots=True)
class SkippedJob:
    """A keyed job cancelled so that its ordering key moves on."""

    id: int
    ordering_key: str


@dataclass(frozen=True, slots=True)
class PauseInEffect:
    """A queue's pause in effect: since and until when (None: until resumed), by whom and why,
    read at `db_now`."""

    queue: str
    paused_at: datetime
    until: datetime | None
    actor: str
    reason: str
    db_now: datetime


@dataclass(frozen=True, slots=True)
class LimitInEffect:
    """A queue's global limits as declared, and the live leases (`running`) it holds now."""

    queue: str
    max_running: int | None
    key_field: str | None
    max_running_per_key: int | None
    rate: int | None
    per_seconds: float | None
    declared_by: str
    updated_at: datetime
    running: int


@dataclass(frozen=True, slots=True)
class UniqueKeyJob:
    """A job stored with a unique key, and whether it holds the key now (its state is one of the
    key's unique states)."""

    id: int
    state: str
    unique_key: str
    holds: bool
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobResultRow:
    """What a caller waiting for a job reads of it (job_result_get)."""

    id: int
    task: str
    state: str
    result: Any
    result_wanted: bool
    result_pending: bool
    """Succeeded, waited for, and its result not stored yet (ctx.atomic stores it after)."""
    last_error_code: str | None
    last_error: str | None
    finished_seconds_ago: float | None


@dataclass(frozen=True, slots=True)
class PauseOutcome:
    """What queue_pause did: nothing (an unknown queue) or the pause now in effect."""

    known: bool
    queue: str | None
    paused_at: datetime | None
    until: datetime | None


@dataclass(frozen=True, slots=True)
class ResumeOutcome:
    """What queue_resume did to a queue that had a pause row: whether the pause was in effect."""

    queue: str
    was_in_effect: bool

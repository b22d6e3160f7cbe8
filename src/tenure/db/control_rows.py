"""What the job-control statements take and give: which jobs a cancel by filter matches, and what
a statement moved or refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenure.db.fetch import Row
from tenure.jobs import JobState

#: States a cancel by filter takes, and those an id may be in to be cancelled.
WAITING = (JobState.SCHEDULED, JobState.PENDING)


CANCELLABLE = (JobState.SCHEDULED, JobState.PENDING, JobState.RUNNING, JobState.DEAD)


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
class ControlRows:
    """What one control statement did: the rows it moved, or why it moved none."""

    moved: list[Row]
    refused: list[Row]
    too_many: bool


def split_rows(rows: list[Row]) -> ControlRows:
    return ControlRows(
        moved=[r for r in rows if r["outcome"] == "moved"],
        refused=[r for r in rows if r["outcome"] == "refused"],
        too_many=any(r["outcome"] == "too_many" for r in rows),
    )

"""What the operations queries (ops_queries) take and give: which dead jobs a search or a
reprocess takes, and the rows of the dead-job list, the worker registry and recent throughput."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class FinishedCount:
    """How many jobs of one queue finished in one state (succeeded, cancelled or dead) during one
    minute; minute 0 is the current one."""

    queue: str
    state: str
    minutes_ago: int
    jobs: int


@dataclass(frozen=True, slots=True)
class VacuumCheck:
    """Whether `jobs` is due a vacuum by autovacuum's own trigger for it, how many dead row
    versions it holds (the statistics' count), and whether this role may vacuum it."""

    dead_rows: int
    due: bool
    may_vacuum: bool


@dataclass(frozen=True, slots=True)
class RegisteredWorker:
    """A worker's row in the registry: what it serves, how busy it is, and how long it has been
    silent (database time)."""

    id: str
    queues: list[str]
    concurrency: int
    busy: int
    started_at: datetime
    seen_at: datetime
    failing: dict[str, Any] | None
    """Its failing services by name (failures, failing_seconds, error); None when none fails."""
    silent_seconds: float


@dataclass(frozen=True, slots=True)
class DeadJob:
    """A dead job as the dead-job workflow lists it, with how long it has been dead."""

    id: int
    queue: str
    task: str
    attempt_count: int
    max_attempts: int
    last_error_code: str | None
    last_error: str | None
    finished_at: datetime
    age_seconds: float


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead jobs a search, a reprocess or a count takes; None fields match any job."""

    queue: str | None = None
    task: str | None = None
    error_code: str | None = None
    older_than: float | None = None
    """Dead for at least this many seconds."""

    def params(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.params().values())


#: The filter that takes every dead job.
EVERY_DEAD_JOB = DeadFilter()

"""What a test expects to have been enqueued, and how it is told when nothing matches: the
arguments and options `assert_enqueued`, `refute_enqueued` and `enqueued` take."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tenure.model.errors import ValidationError
from tenure.model.jobs import Job, JobState
from tenure.tasks import AnyTask

#: The states of a job that waits to run: what the assertions look at unless told otherwise.
WAITING = ("scheduled", "pending")
EVERY_STATE = tuple(s.value for s in JobState)
#: How far a job's run time may be from the `run_at` a test expects (the clock moved on between
#: the enqueue and the assertion).
DEFAULT_WITHIN = timedelta(seconds=1)


@dataclass(frozen=True)
class Expected:
    """A description of jobs: of `task` (any, when None), whose arguments hold `args` (each one
    given, compared as stored), and with the options given (None: any)."""

    task: str | None
    args: dict[str, Any]
    queue: str | None
    priority: int | None
    run_at: datetime | None
    within: timedelta
    states: tuple[str, ...]

    @classmethod
    def of(
        cls,
        task: str | AnyTask | None,
        args: dict[str, Any] | None,
        payload: dict[str, Any],
        *,
        queue: str | None,
        priority: int | None,
        run_at: datetime | None,
        within: float | timedelta,
        state: str | Sequence[str],
    ) -> Expected:
        both = sorted(set(args or {}) & set(payload))
        if both:
            raise ValidationError(
                f"argument(s) {', '.join(both)} given both in args= and as keywords: give each once"
            )
        if run_at is not None and run_at.tzinfo is None:
            raise ValidationError(
                f"run_at={run_at.isoformat()} has no time zone: give an aware datetime "
                "(datetime.now(timezone.utc) + timedelta(...))"
            )
        return cls(
            task=_name(task),
            args={**(args or {}), **payload},
            queue=queue,
            priority=priority,
            run_at=run_at,
            within=within if isinstance(within, timedelta) else timedelta(seconds=within),
            states=(state,) if isinstance(state, str) else tuple(state),
        )

    def matches(self, job: Job) -> bool:
        """The options the database query does not filter on: priority and run time."""
        if self.priority is not None and job.priority != self.priority:
            return False
        return self.run_at is None or abs(job.available_at - self.run_at) <= self.within

    def describe(self) -> str:
        """`job of shop.tasks.send_receipt with args {"order_id": 8} on queue "emails", ...`."""
        parts = [f"job of {self.task or 'any task'}"]
        if self.args:
            parts.append(f"with args {_json(self.args)}")
        if self.queue is not None:
            parts.append(f'on queue "{self.queue}"')
        if self.priority is not None:
            parts.append(f"at priority {self.priority}")
        if self.run_at is not None:
            parts.append(f"to run at {self.run_at.isoformat()} (within {self.within.total_seconds():g}s)")
        parts.append(" or ".join(self.states))
        return " ".join(parts)


def listing(jobs: Sequence[Job], *, most: int = 10) -> str:
    """The jobs, one line each, as an assertion message lists them."""
    if not jobs:
        return "  none"
    lines = [
        f'  job {j.id}: {j.task} {j.state} on queue "{j.queue}", priority {j.priority}, '
        f"runs at {j.available_at.isoformat()}, args {_json(j.payload)}"
        for j in jobs[:most]
    ]
    if len(jobs) > most:
        lines.append(f"  ... and {len(jobs) - most} more")
    return "\n".join(lines)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _name(task: str | AnyTask | None) -> str | None:
    return task if task is None or isinstance(task, str) else task.name

"""Workflows as stored and shown: what enqueueing one returns, a workflow with its steps counted
by state, and one step with what it waits for (docs/workflows.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

#: What happens to the steps after a dead step: held until it is reprocessed, or cancelled.
OnDead = Literal["hold", "cancel"]
ON_DEAD: tuple[OnDead, ...] = ("hold", "cancel")

#: A workflow has at most this many steps (enqueue_workflow() refuses more).
MAX_STEPS = 100_000


@dataclass(frozen=True, slots=True)
class EnqueuedWorkflow:
    """A workflow just enqueued: its id, and each step's job id by step name (every step's job id
    is drawn at enqueue, so a caller can wait for the last step's result from the start)."""

    id: int
    jobs: dict[str, int]


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """A workflow with its steps counted by state. `queued` counts released steps whose job waits
    to be claimed (or to retry), `running` those whose job runs."""

    id: int
    name: str
    on_dead: str
    created_at: datetime
    cancelled_at: datetime | None
    cancelled_by: str | None
    cancel_reason: str | None
    steps: int
    succeeded: int
    running: int
    queued: int
    waiting: int
    held: int
    dead: int
    cancelled: int
    last_finished_at: datetime | None
    db_now: datetime
    """The database's clock when this was read: what relative times are measured against."""

    @property
    def state(self) -> str:
        """One word for the whole: cancelled, succeeded, failed (a dead step: the steps after
        it are held or cancelled), or running (something is still to run)."""
        if self.cancelled_at is not None:
            return "cancelled"
        if self.succeeded == self.steps:
            return "succeeded"
        if self.dead or (self.cancelled and not (self.running or self.queued or self.waiting)):
            return "failed"
        return "running"


def finished_workflow(summary: WorkflowSummary) -> str:
    """Why a workflow whose steps have all finished cannot be cancelled, with what it ran to."""
    ended = [f"{summary.succeeded}/{summary.steps} succeeded"]
    ended += [f"{n} {word}" for n, word in ((summary.dead, "dead"), (summary.cancelled, "cancelled")) if n]
    fix = (
        f"; `tenure workflows retry {summary.id} --reason ...` reprocesses its dead steps"
        if summary.dead or summary.cancelled
        else ""
    )
    return (
        f"workflow {summary.id} has finished ({', '.join(ended)}): there is nothing left to cancel, "
        f"and nothing was changed{fix}"
    )


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """One step: its state (waiting, held, cancelled, released, succeeded, dead), the state of
    its job once released, and the steps it waits for."""

    name: str
    task: str
    queue: str
    job_id: int
    state: str
    job_state: str | None
    attempts: int
    max_attempts: int
    remaining: int
    after: list[str]
    input_arg: str | None
    released_at: datetime | None
    attempted_at: datetime | None
    finished_at: datetime | None
    last_error_code: str | None
    last_error: str | None
    condition: dict[str, Any] | None = None
    """What the step waits for once its dependencies succeeded (tenure.model.conditions)."""
    condition_state: str | None = None
    """Its wait once released: 'waiting', or how it ended ('signalled', 'timed_out', 'ended')."""
    condition_since: datetime | None = None
    condition_deadline: datetime | None = None

    @property
    def condition_text(self) -> str:
        """The condition in words: what runs, skips or cancels the step; "" when it has none."""
        return describe_condition(self.condition)

    @property
    def shown_state(self) -> str:
        """The state a person wants to read: a released step's job state (pending, running, ...)."""
        if self.state == "released" and self.job_state is not None:
            return self.job_state
        return self.state


@dataclass(frozen=True, slots=True)
class WorkflowCancel:
    """What cancelling a workflow did: 'cancelled', 'already' when it was cancelled before, or
    'finished' when every step had finished and nothing was changed;
    how many of its steps were not released yet (waiting or held: they are now cancelled), and
    which queued or running step jobs it cancelled or revoked."""

    id: int
    outcome: str
    steps_cancelled: int
    jobs_cancelled: list[int]


def _span(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds:g} seconds"


def describe_condition(condition: dict[str, Any] | None) -> str:
    """A step's condition in words, e.g. "a signal to approval:7 runs it; after 3 days it is
    cancelled" (the time counted from the step's release)."""
    if not condition:
        return ""
    does = {"resume": "runs it", "skip": "skips it", "cancel": "cancels it"}
    parts = []
    if "key" in condition:
        parts.append(f"a signal to {condition['key']} {does[condition.get('on_signal', 'resume')]}")
    if "seconds" in condition:
        then = {"resume": "it runs", "skip": "it is skipped", "cancel": "it is cancelled"}
        parts.append(
            f"after {_span(float(condition['seconds']))} {then[condition.get('on_deadline', 'resume')]}"
        )
    return "; ".join(parts)

"""The job model: states, the job row, and the lease a worker holds."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple


class JobState(enum.StrEnum):
    """A job's state. Each value documents who moves a job in and who moves it out."""

    SCHEDULED = "scheduled"
    """Waiting for a run time in the future, outside the claim indexes.
    In: enqueue with a later run time (delay, run_at), a retry or a lease recovery with a backoff.
    Out: promotion when due (-> pending), or an operator's cancel."""

    PENDING = "pending"
    """Due: claimable. In: enqueue, promotion, a retry without delay, a graceful release, reprocess.
    Out: a worker's claim (-> running), or an operator's cancel."""

    RUNNING = "running"
    """In: a claim, which sets owner, token and lease expiry.
    Out: the lease holder's fenced completion or failure, or recovery once the lease expired."""

    WAITING = "waiting"
    """Its handler waits for a signal or a time (docs/waits.md), holding no lease and no slot,
    outside the claim indexes. In: the lease holder's fenced wait. Out: a signal delivered to it,
    its wait's deadline, or an operator's end of the wait (-> pending), or an operator's cancel."""

    SUCCEEDED = "succeeded"
    """In: the lease holder's fenced completion. Out: none (terminal)."""

    DEAD = "dead"
    """In: a permanent failure, a spent attempt budget, or an expired lease on the last attempt.
    Out: an operator's reprocess (-> pending) or cancel. Dead jobs are kept, never deleted."""

    CANCELLED = "cancelled"
    """In: an operator's cancel of a scheduled, pending, waiting or dead job. Out: reprocess."""

    @property
    def is_terminal(self) -> bool:
        """Succeeded, dead or cancelled: the job is finished (it has a `finished_at`)."""
        return self in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED)


class Lease(NamedTuple):
    """A time-bounded claim on one job. Every write after the claim must present it. Immutable
    (a named tuple: a worker makes one for every job it claims, and a frozen dataclass cost 0.7 us
    to make, a named tuple a fifth of that)."""

    job_id: int
    owner: str
    token: int
    expires_at: datetime
    deadline: datetime


class ClaimedJob(NamedTuple):
    """What a worker learns from a successful claim. Immutable: a named tuple, made for every job a
    worker claims (a frozen dataclass of these fields cost 2.2 us of the worker's CPU a job to make,
    a tenth of all it spends on a no-op job; a named tuple is made in C)."""

    id: int
    queue: str
    task: str
    payload: dict[str, Any]
    priority: int
    attempt: int
    max_attempts: int
    lease: Lease
    progress: Any
    idempotency_key: uuid.UUID
    available_at: datetime
    created_at: datetime
    db_now: datetime
    result_wanted: bool = False
    """A caller waits for this job's result: its completion notifies."""
    snoozes: int = 0
    """How many times the job snoozed before this attempt."""
    trace_context: dict[str, str] | None = None
    """The W3C trace context of the span that enqueued the job (tenure.telemetry.tracing), if any."""
    secret_refs: bool | None = None
    """Whether the payload holds secret references (`tenure.secret`), which the worker resolves
    before the handler runs; None when not known, and the worker looks."""


@dataclass(frozen=True, slots=True)
class Job:
    """A job row as stored, for inspection."""

    id: int
    queue: str
    task: str
    payload: dict[str, Any]
    state: JobState
    priority: int
    available_at: datetime
    attempt_count: int
    max_attempts: int
    lease_owner: str | None
    lease_token: int
    lease_expires_at: datetime | None
    lease_deadline: datetime | None
    progress: Any
    last_error_code: str | None
    last_error: str | None
    idempotency_key: uuid.UUID
    created_at: datetime
    attempted_at: datetime | None
    finished_at: datetime | None
    ordering_key: str | None = None
    result: Any = None
    """The handler's return value, stored when the job succeeded; None otherwise."""
    result_wanted: bool = False
    snoozes: int = 0
    unreadable: str | None = None
    """Why some of the row's JSON (payload, progress, result) could not be read here, a payload
    nested past Python's recursion limit; those values are then empty. None for a normal row."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One entry of a job's append-only history."""

    id: int
    job_id: int
    event: str
    from_state: JobState | None
    to_state: JobState | None
    token: int
    worker: str | None
    error_code: str | None
    error: str | None
    at: datetime


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """The identity of a job that was just enqueued."""

    id: int
    idempotency_key: uuid.UUID | None
    """The job's idempotency key; None for an existing job found by its unique key (its key is
    its own, and the producer role may not read it)."""
    available_at: datetime
    existing: bool = False
    """True when no job was added: this is the job that already had the idempotency key, or
    that holds the unique key."""
    unique_key: str | None = None
    handed: bool = False
    """True when the job went straight to an idle worker's offer in its enqueue (docs/hand-off.md):
    it was stored running, already that worker's."""


#: What `priority` and `max_attempts` left as None become for a task the client does not know.
DEFAULT_PRIORITY = 0
DEFAULT_MAX_ATTEMPTS = 20


@dataclass(slots=True)
class JobSpec:
    """A job to enqueue, validated before anything is written.

    `queue`, `priority` and `max_attempts` left as None come from the task's policy when the
    client's registry knows the task. For a task it does not know, `queue` must be given (the
    queue a worker that has the task serves) and the others default to 0 and 20.
    """

    task: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: float | None = None
    max_attempts: int | None = None
    ordering_key: str | None = None
    """Jobs sharing a key run one at a time, in enqueue order; None: no ordering."""
    result_wanted: bool = False
    """A caller will wait for this job's result (`app.result`): its finish then notifies at
    once. Without it a waiter polls; jobs nobody waits for send no notification."""
    unique: Any = None
    """A tenure.Unique (or a key string, or True): while a job holding the same key is in its
    scope, the enqueue returns that job instead of a second one. None: the task's policy;
    False: not unique."""
    idempotency_key: uuid.UUID | str | None = None
    """The caller's own key for this enqueue: retried after an ambiguous commit, the enqueue
    returns the job the first attempt stored, never a second one. A string is turned into a
    UUID (uuid5). None: a fresh key."""
    trace_context: dict[str, str] | None = None
    """Set by the client when tracing is on (tenure.telemetry.tracing): the enqueue span's W3C context."""

    def completed(self, queue: str, priority: int, max_attempts: int, unique: Any) -> JobSpec:
        """A copy with the options the client fills in (JobBuilder.check). dataclasses.replace's
        work, written out: it is on every enqueue's path, where replace looked each field up by
        name (about twenty calls). A test holds it to every field."""
        return JobSpec(
            self.task,
            self.payload,
            queue,
            priority,
            self.run_at,
            self.delay,
            max_attempts,
            self.ordering_key,
            self.result_wanted,
            unique,
            self.idempotency_key,
            self.trace_context,
        )

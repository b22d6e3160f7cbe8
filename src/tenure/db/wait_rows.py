"""What the wait statements give back, shared by the async queries and their blocking twin."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class WaitStep:
    """What `job_wait` did: 'resolved' (an earlier attempt's wait has ended: `state` says how),
    'signalled' (a signal was waiting in the mailbox: it is the job's now), 'waiting' (the job
    left running), 'busy' (its row was locked elsewhere: try again) or 'lost' (the fence)."""

    outcome: str
    state: str | None
    signal_id: int | None
    payload: Any
    sent_at: datetime | None
    ended_by: str | None


@dataclass(frozen=True, slots=True)
class WaitsExpired:
    """One pass over due deadlines: how many waits timed out, and when the next is due."""

    timed_out: int
    queues_notified: int
    next_due: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class SignalsSummary:
    """The mailbox at a glance."""

    kept: int
    oldest_kept_at: datetime | None
    delivered: int
    expired: int
    waiting: int


@dataclass(frozen=True, slots=True)
class SignalsSwept:
    delivered: int
    expired: int

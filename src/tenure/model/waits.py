"""Waits and signals: what a handler's wait hands back, how a wait ends an attempt, and the bounds
of a signal (docs/waits.md)."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tenure.model.errors import ValidationError

#: The longest signal key (and the longest key a handler may wait for), in characters.
MAX_SIGNAL_KEY = 400
#: The longest wait name, and the longest signal idempotency key, in characters.
MAX_WAIT_NAME = 200
MAX_IDEMPOTENCY_KEY = 200
#: The largest signal payload, as compact JSON text, in bytes.
MAX_SIGNAL_BYTES = 65536
#: How long a signal nobody waits for yet is kept for a waiter, unless its sender says otherwise.
DEFAULT_SIGNAL_KEEP = timedelta(days=7)
#: The longest a signal may be kept, and the longest a wait may last.
MAX_SIGNAL_KEEP = timedelta(days=90)
MAX_WAIT = timedelta(days=366)
#: The name of the wait a workflow step's condition begins (its job's only wait until it runs).
#: Names beginning with '@' are Tenure's: a handler's wait may not take one.
STEP_CONDITION_WAIT = "@step"


class WaitStarted(BaseException):
    """Raised by `ctx.wait_for` and `ctx.sleep` once the job has left `running` for `waiting`: the
    attempt is over, and the handler runs again from the top when the wait ends. A BaseException,
    as asyncio.CancelledError, so that a handler's `except Exception` does not swallow it: a
    handler that catches it anyway and goes on writes nothing (its lease has ended, and every write
    after it is refused by the fence)."""

    def __init__(self, job_id: int, name: str) -> None:
        super().__init__(f"job {job_id} waits ({name}); its handler runs again when the wait ends")
        self.job_id = job_id
        self.name = name


@dataclass(frozen=True, slots=True)
class WaitResult:
    """How a wait ended, as `ctx.wait_for` returns it: a signal was delivered (`payload` is what
    its sender sent), the deadline passed (`timed_out`), or an operator ended the wait (`ended`)."""

    name: str
    outcome: str
    """'signalled', 'timed_out' or 'ended'."""
    payload: Any = None
    signal_id: int | None = None
    sent_at: datetime | None = None
    ended_by: str | None = None

    @property
    def signalled(self) -> bool:
        return self.outcome == "signalled"

    @property
    def timed_out(self) -> bool:
        return self.outcome == "timed_out"

    @property
    def ended(self) -> bool:
        return self.outcome == "ended"


@dataclass(frozen=True, slots=True)
class SignalSent:
    """What `signal` did: 'delivered' (it woke `job_id`), 'kept' (no job waits for its key yet: it
    waits in the mailbox for one) or 'duplicate' (a signal with the same idempotency key was sent
    to the key before: nothing was written; the earlier signal's id, and its job if delivered)."""

    signal_id: int
    outcome: str
    job_id: int | None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job waiting now: what for (`key`, None for a sleep), since when, and until when."""

    job_id: int
    queue: str
    task: str
    name: str
    key: str | None
    since: datetime
    deadline: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """One wait a job began, as `tenure jobs show` lists it: ongoing ('waiting') or how it ended."""

    name: str
    key: str | None
    state: str
    since: datetime
    deadline: datetime | None
    token: int
    resolved_at: datetime | None
    ended_by: str | None
    signal_id: int | None
    payload: Any
    sent_at: datetime | None
    sent_by: str | None


def check_signal_key(key: object, what: str = "signal key") -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_SIGNAL_KEY:
        shown = f"{len(key)} characters" if isinstance(key, str) else type(key).__name__
        raise ValidationError(
            f"a {what} must be a string of 1 to {MAX_SIGNAL_KEY} characters, got {shown}; name what is "
            "awaited, e.g. 'payment:order-7', and hash a longer key"
        )
    return key


def check_wait_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_WAIT_NAME:
        raise ValidationError(
            f"a wait name must be a string of 1 to {MAX_WAIT_NAME} characters, got {name!r}"
        )
    if name.startswith("@"):
        raise ValidationError(
            "wait names beginning with '@' are Tenure's own (a workflow step's condition is "
            f"{STEP_CONDITION_WAIT!r}), got {name!r}: name the wait without the '@'"
        )
    return name


def check_idempotency_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise ValidationError(
            f"a signal's idempotency key must be a string of 1 to {MAX_IDEMPOTENCY_KEY} characters, "
            f"got {key!r}"
        )
    return key


def seconds_of(value: object, what: str, longest: timedelta, *, optional: bool) -> float | None:
    """`value` (seconds or a timedelta) as seconds, in (0, longest]; None when optional and None."""
    if value is None and optional:
        return None
    seconds: Any = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, numbers.Real)
        or not math.isfinite(seconds)
        or not 0 < float(seconds) <= longest.total_seconds()
    ):
        raise ValidationError(
            f"{what} must be a number of seconds or a timedelta, more than 0 and at most "
            f"{longest.days} days, got {value!r}"
        )
    return float(seconds)


def bounded_json(payload: Any, what: str = "a signal's payload") -> str:
    """`payload` (a signal's, or a published value: `what` names it) as the JSON text stored, at
    most MAX_SIGNAL_BYTES, or ValidationError naming why it cannot be."""
    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} must be JSON (dict, list, str, number, bool or None); {exc}") from None
    if "\\u0000" in text:
        raise ValidationError(f"{what} contains a NUL character, which PostgreSQL's jsonb cannot store")
    size = len(text.encode())
    if size > MAX_SIGNAL_BYTES:
        raise ValidationError(
            f"{what} is {size} bytes of JSON, over the limit of {MAX_SIGNAL_BYTES}: store large "
            "data elsewhere and send a reference to it"
        )
    return text


#: The longest key a value is published under, in characters.
MAX_PUBLISHED_KEY = 200


def check_published_key(key: object) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_PUBLISHED_KEY:
        raise ValidationError(
            f"a published value's key must be a string of 1 to {MAX_PUBLISHED_KEY} characters, got {key!r}"
        )
    return key


@dataclass(frozen=True, slots=True)
class Published:
    """A value a job published (`ctx.publish`) for its caller: on its workflow when it is a step,
    else on itself. The latest publish of a key stands."""

    key: str
    value: Any
    published_at: datetime
    by_job: int

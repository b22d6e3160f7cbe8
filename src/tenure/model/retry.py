"""Backoff with jitter and a cap, and the classification of failures into retry classes."""

from __future__ import annotations

import asyncio
import enum
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg_pool import PoolTimeout, TooManyRequests

from tenure.model.errors import (
    RETRYABLE_SQLSTATES,
    ConfigurationError,
    Contention,
    DatabaseUnavailable,
    JobFailure,
    LeaseLost,
    RetriesExhausted,
)


class FailureClass(enum.StrEnum):
    """How a failure is retried: what `FailurePolicy.classify` decides for an exception."""

    PERMANENT = "permanent"
    """Can never succeed as enqueued: dead at once."""
    TRANSIENT = "transient"
    """A passing problem: retried within the job's full attempt budget."""
    UNKNOWN = "unknown"
    """Anything unrecognised: retried within a small budget, with full diagnostics kept."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: base * 2^(attempt-1), capped, minus up to `jitter` of it at random."""

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        for name in ("base", "cap"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(
                    f"backoff {name} must be a finite number of seconds >= 0, got {value!r}"
                )
            object.__setattr__(self, name, float(value))
        if not _is_number(self.jitter) or not 0 <= self.jitter <= 1:
            raise ConfigurationError(
                f"backoff jitter must be between 0 (none) and 1 (full jitter), got {self.jitter!r}"
            )
        object.__setattr__(self, "jitter", float(self.jitter))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt number `attempt` (1 for the first) failed, before the next."""
        # The exponent is bounded so that a large attempt number cannot overflow a float.
        raw = min(self.cap, self.base * 2.0 ** min(max(0, attempt - 1), 1000))
        draw: float = (rng or random).random()
        return raw * (1 - self.jitter * draw)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


Classifier = Callable[[BaseException], FailureClass | None]


#: SQLSTATEs of the connection, the pooler or the server rather than of the job: the job is
#: fine, the infrastructure was not, so they are transient and never spend the unknown budget.
#: 08 connection exceptions; 53 insufficient resources (too many connections, out of memory or
#: disk); 57P operator intervention (shutdown, crash recovery, cannot connect now); 25006 a
#: read-only server (a standby just after a failover); 26000 and 42P05 prepared statements a
#: transaction pooler (PgBouncer) lost or duplicated between server connections; 55P03 a lock
#: not available; 57014 a statement cancelled (statement_timeout).
INFRASTRUCTURE_SQLSTATE_CLASSES = ("08", "53", "57P")
INFRASTRUCTURE_SQLSTATES = frozenset({"25006", "26000", "42P05", "55P03", "57014"})


def is_infrastructure_error(exc: BaseException) -> bool:
    """An error of the database, its connection or a pooler, not of the job itself."""
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if state.startswith(INFRASTRUCTURE_SQLSTATE_CLASSES) or state in INFRASTRUCTURE_SQLSTATES:
            return True
        # No SQLSTATE: the connection broke, the client could not use it (InterfaceError), or
        # client and server fell out of step (InternalError, a pooler's server restarting).
        return not state and isinstance(
            exc, psycopg.OperationalError | psycopg.InterfaceError | psycopg.InternalError
        )
    # Tenure's own word for a server it cannot reach (a pool that cannot open, a lost connection).
    return isinstance(exc, PoolTimeout | TooManyRequests | DatabaseUnavailable)


def _builtin_class(exc: BaseException) -> FailureClass:
    if isinstance(exc, JobFailure) and exc.retryable is not None:
        return FailureClass.TRANSIENT if exc.retryable else FailureClass.PERMANENT
    if is_infrastructure_error(exc):
        return FailureClass.TRANSIENT
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if state in RETRYABLE_SQLSTATES:
            return FailureClass.TRANSIENT
        if isinstance(exc, psycopg.OperationalError):
            return FailureClass.TRANSIENT  # connection lost, server restarting
        if state.startswith(("22", "23")):
            return FailureClass.UNKNOWN  # data or constraint errors: maybe a race, maybe a bug
    if isinstance(exc, TimeoutError | ConnectionError | asyncio.TimeoutError):
        return FailureClass.TRANSIENT
    if isinstance(exc, LeaseLost):
        return FailureClass.TRANSIENT
    if isinstance(exc, Contention | RetriesExhausted):
        # The transaction runner's wrappers of 55P03, 40001 and 40P01, transient like the raw errors.
        return FailureClass.TRANSIENT
    return FailureClass.UNKNOWN


@dataclass
class FailurePolicy:
    """Decides how a handler's exception is treated. Extend it with `classifiers` or `permanent`."""

    unknown_budget: int = 3
    permanent: tuple[type[BaseException], ...] = ()
    transient: tuple[type[BaseException], ...] = ()
    classifiers: list[Classifier] = field(default_factory=list)

    def classify(self, exc: BaseException) -> FailureClass:
        """The class of `exc`: the first classifier with a verdict, then `permanent` and
        `transient`, then Tenure's own rules (`Permanent`, `Transient`, database errors, ...)."""
        for classify in self.classifiers:
            verdict = classify(exc)
            if verdict is not None:
                return verdict
        if self.permanent and isinstance(exc, self.permanent):
            return FailureClass.PERMANENT
        if self.transient and isinstance(exc, self.transient):
            return FailureClass.TRANSIENT
        return _builtin_class(exc)

    def retry_delay(
        self,
        failure: FailureClass,
        attempt: int,
        max_attempts: int,
        backoff: Backoff,
        requested_delay: float | None = None,
    ) -> float | None:
        """Seconds until the next attempt, or None for dead now."""
        if failure is FailureClass.PERMANENT or attempt >= max_attempts:
            return None
        if failure is FailureClass.UNKNOWN and attempt >= self.unknown_budget:
            return None
        return requested_delay if requested_delay is not None else backoff.delay(attempt)


def error_code(exc: BaseException) -> str:
    """A short, stable code for metrics and the audit log."""
    if isinstance(exc, JobFailure):
        return exc.code
    if isinstance(exc, psycopg.Error) and exc.sqlstate:
        return f"SQLSTATE_{exc.sqlstate}"
    return type(exc).__name__

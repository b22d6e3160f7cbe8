"""How each long-lived service of a worker is doing, and when the worker must give up.

The supervisor (tenure.worker.service) counts every failure of a service here. A critical
service (one without which the worker cannot finish the jobs it claims) that has failed without a
single success for longer than `service_failure_limit` makes the worker stop and exit non-zero,
so a process supervisor restarts it instead of it running jobs it cannot finish. A failure that
proves the configuration wrong (a prepared statement lost behind a pooler that cannot carry it,
tenure.db.pooler) stops the worker at once: retrying cannot mend it, and until it stops its
statements may run another client's. Health is what `tenure status` and the metrics show about a
worker's services.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from tenure.db.pooler import is_lost_prepared_statement, prepared_statements_lost

log = logging.getLogger("tenure.worker")

#: Backoff after consecutive failures of one service: 0.1 s doubling up to this many seconds.
MAX_BACKOFF = 5.0


def describe_error(exc: BaseException) -> str:
    """One line naming the exception and its cause, bounded, for logs and the registry."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        line = f"{line} [SQLSTATE {sqlstate}]"
    cause = exc.__cause__
    if cause is not None and cause is not exc:
        line = f"{line} (caused by {type(cause).__name__}: {str(cause).strip()[:100]})"
    return line[:300]


@dataclass
class ServiceHealth:
    """How one service is doing: failing since when, how often, with what."""

    name: str
    critical: bool
    consecutive_failures: int = 0
    total_failures: int = 0
    failing_since: float | None = None  # monotonic time of the first failure in the current run
    last_error: str | None = None
    #: Why the worker must stop now whatever `critical` says: a failure no retry can mend.
    fault: str | None = None

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failing_for(self, now: float | None = None) -> float:
        if self.failing_since is None:
            return 0.0
        return (now if now is not None else time.monotonic()) - self.failing_since

    def failed(self, exc: BaseException) -> None:
        self.consecutive_failures += 1
        self.total_failures += 1
        self.last_error = describe_error(exc)
        if self.fault is None and is_lost_prepared_statement(exc):
            self.fault = (
                f"the {self.name} failed with {self.last_error}: {prepared_statements_lost('the database')}"
            )
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def succeeded(self) -> None:
        if self.failing_since is not None:
            log.info(
                "%s recovered after %s failures over %.1fs",
                self.name,
                self.consecutive_failures,
                self.failing_for(),
            )
        self.consecutive_failures = 0
        self.failing_since = None

    def backoff(self, failures: int | None = None) -> float:
        """The wait after `failures` failures in a row (by default, the ones so far)."""
        count = self.consecutive_failures if failures is None else failures
        return min(MAX_BACKOFF, 0.1 * 2.0 ** min(count, 10))

    def as_dict(self) -> dict[str, object]:
        return {
            "failing_seconds": round(self.failing_for(), 1),
            "failures": self.consecutive_failures,
            "error": self.last_error,
        }


class ServiceHealthBoard:
    """Every service's health, and the verdict on whether the worker must give up."""

    def __init__(self, failure_limit: float) -> None:
        self.failure_limit = failure_limit
        self.services: dict[str, ServiceHealth] = {}

    def service(self, name: str, *, critical: bool = True) -> ServiceHealth:
        if name not in self.services:
            self.services[name] = ServiceHealth(name, critical)
        return self.services[name]

    def failing(self) -> dict[str, dict[str, object]]:
        """The failing services, for the worker registry and `tenure status`."""
        return {name: h.as_dict() for name, h in sorted(self.services.items()) if h.failing}

    def fatal(self) -> str | None:
        """Why the worker must stop, or None: a service met a fault, or a critical one failed for
        too long."""
        for health in self.services.values():
            if health.fault is not None:
                return health.fault
        now = time.monotonic()
        for health in self.services.values():
            if health.critical and health.failing_for(now) > self.failure_limit:
                return (
                    f"the {health.name} has failed for {health.failing_for(now):.0f}s without a success "
                    f"(limit {self.failure_limit:.0f}s): {health.last_error}"
                )
        return None

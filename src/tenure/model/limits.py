"""Global limits on a queue: at most N of its jobs running across the whole cluster, at
most M per value of a payload field (per customer, say), and at most R starts per period.

Declared in code (`app.limit(...)`); every worker of the app writes the declaration to the
database when it starts, and the claim enforces it for every worker, whichever declared it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from tenure.model.errors import ConfigurationError
from tenure.model.validation import check_queue


def _count(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(f"{name} must be an integer >= 1 or None, got {value!r}")


@dataclass(frozen=True)
class QueueLimit:
    queue: str
    max_running: int | None = None
    key: str | None = None
    """The payload field whose value each `max_running_per_key` counts apart."""
    max_running_per_key: int | None = None
    rate: int | None = None
    """Starts allowed per `per` seconds, over the whole cluster (a token bucket, full at first)."""
    per: float = 1.0

    def __post_init__(self) -> None:
        check_queue(self.queue)
        _count("max_running", self.max_running)
        _count("max_running_per_key", self.max_running_per_key)
        _count("rate", self.rate)
        if (self.key is None) != (self.max_running_per_key is None):
            raise ConfigurationError(
                "a per-key limit needs both key= (the payload field) and max_running_per_key=, "
                f"got key={self.key!r}, max_running_per_key={self.max_running_per_key!r}"
            )
        if self.key is not None and (not isinstance(self.key, str) or not 1 <= len(self.key) <= 200):
            raise ConfigurationError(f"key must be a payload field name, got {self.key!r}")
        per = self.per
        if isinstance(per, bool) or not isinstance(per, numbers.Real) or not math.isfinite(per) or per <= 0:
            raise ConfigurationError(f"per must be a positive number of seconds, got {per!r}")
        if self.max_running is None and self.key is None and self.rate is None:
            raise ConfigurationError(
                f"a limit on queue {self.queue!r} limits nothing: give max_running, "
                "key with max_running_per_key, or rate"
            )

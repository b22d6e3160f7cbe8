"""Enqueue-to-start latency probes: the payload carries the producer's clock, and the handler
appends (now - sent) to a file, the same way for every contender (one machine, one clock)."""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

PROBE_FILE_ENV = "TENURE_BENCH_PROBE_FILE"
#: Where the signal probe also writes the time from its signal's send to its handler's start, so
#: that the wait's own statement (handler start to past the wait) can be told apart.
STARTED_FILE_ENV = "TENURE_BENCH_PROBE_STARTED_FILE"


def gap_seconds() -> float:
    """The wait between two probes: random, 20-40 ms, so that no probe falls in step with a
    contender's own timers."""
    return 0.02 + random.random() * 0.02


def record(sent: float, *, at: float | None = None, file_env: str = PROBE_FILE_ENV) -> None:
    """Called first thing by each contender's probe handler: appends the time from `sent` to `at`
    (now, by default) to the file named by `file_env`."""
    elapsed = (time.time() if at is None else at) - sent
    path = os.environ.get(file_env)
    if path:
        with open(path, "a", encoding="ascii") as f:
            f.write(f"{elapsed:.6f}\n")


def read(path: Path) -> list[float]:
    if not path.exists():
        return []
    return [float(line) for line in path.read_text(encoding="ascii").split()]


def percentiles_ms(samples: list[float]) -> dict[str, float | int | None]:
    if len(samples) < 2:
        return {"p50_ms": None, "p99_ms": None, "samples": len(samples)}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49] * 1000, 3), "p99_ms": round(cuts[98] * 1000, 3), "samples": len(samples)}

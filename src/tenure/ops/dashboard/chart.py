"""The overview's charts: jobs finished per minute, and retries, lease expiries and fenced writes
per minute, over the last hour, as SVG geometry the template draws (no charting library, nothing
to load)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MINUTES = 60
WIDTH = 600.0
HEIGHT = 120.0
#: Bottom to top within a minute's stack.
FINISHED = ("succeeded", "cancelled", "dead")
TROUBLE = ("retry", "lease_expired", "fencing_lost")


@dataclass(frozen=True, slots=True)
class Bar:
    kind: str
    minutes_ago: int
    count: int
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True, slots=True)
class Chart:
    width: float
    height: float
    minutes: int
    peak: int
    totals: dict[str, int]
    bars: list[Bar]


def stacked_chart(
    rows: Iterable[dict[str, Any]],
    kinds: tuple[str, ...],
    kind_column: str,
    count_column: str,
    minutes: int = MINUTES,
) -> Chart:
    """Rows of (kind, minutes_ago, count), all queues together, as one stacked bar per minute;
    the current minute is drawn rightmost and the busiest minute fills the height."""
    per_minute = [dict.fromkeys(kinds, 0) for _ in range(minutes)]
    for r in rows:
        if r[kind_column] in kinds and 0 <= r["minutes_ago"] < minutes:
            per_minute[r["minutes_ago"]][r[kind_column]] += int(r[count_column])
    peak = max((sum(m.values()) for m in per_minute), default=0)
    slot = WIDTH / minutes
    bars = []
    for minutes_ago, counts in enumerate(per_minute):
        x = WIDTH - (minutes_ago + 1) * slot
        base = HEIGHT
        for kind in kinds:
            if not counts[kind]:
                continue
            height = HEIGHT * counts[kind] / peak
            base -= height
            bars.append(
                Bar(
                    kind,
                    minutes_ago,
                    counts[kind],
                    round(x + 0.5, 2),
                    round(base, 2),
                    round(slot - 1, 2),
                    round(height, 2),
                )
            )
    totals = {kind: sum(m[kind] for m in per_minute) for kind in kinds}
    return Chart(WIDTH, HEIGHT, minutes, peak, totals, bars)


def throughput_chart(rows: Iterable[dict[str, Any]], minutes: int = MINUTES) -> Chart:
    """From gauge_finished_recent rows (queue, state, minutes_ago, jobs)."""
    return stacked_chart(rows, FINISHED, "state", "jobs", minutes)


def trouble_chart(rows: Iterable[dict[str, Any]], minutes: int = MINUTES) -> Chart:
    """From dashboard_trouble_recent rows (event, minutes_ago, events)."""
    return stacked_chart(rows, TROUBLE, "event", "events", minutes)

"""The overview's charts: jobs finished per minute, and retries, lease expiries and fenced writes
per minute, over the last hour, as SVG geometry the template draws (no charting library, nothing
to load)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tenure.db.ops_rows import FinishedCount
from tenure.ops.dashboard.queries import TroubleCount

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
    counts_by_minute: Iterable[tuple[str, int, int]], kinds: tuple[str, ...], minutes: int = MINUTES
) -> Chart:
    """Counts of (kind, minutes_ago, count), all queues together, as one stacked bar per minute;
    the current minute is drawn rightmost and the busiest minute fills the height."""
    per_minute = [dict.fromkeys(kinds, 0) for _ in range(minutes)]
    for kind, minutes_ago, count in counts_by_minute:
        if kind in kinds and 0 <= minutes_ago < minutes:
            per_minute[minutes_ago][kind] += int(count)
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


def throughput_chart(rows: Iterable[FinishedCount], minutes: int = MINUTES) -> Chart:
    """Jobs finished per minute, by the state they finished in."""
    return stacked_chart(((r.state, r.minutes_ago, r.jobs) for r in rows), FINISHED, minutes)


def trouble_chart(rows: Iterable[TroubleCount], minutes: int = MINUTES) -> Chart:
    """Retries, lease expiries and fenced writes per minute, from the audit log."""
    return stacked_chart(((r.event, r.minutes_ago, r.events) for r in rows), TROUBLE, minutes)

"""The overview's throughput chart: finished jobs per minute over the last hour, as SVG geometry
the template draws (no charting library, nothing to load)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MINUTES = 60
WIDTH = 600.0
HEIGHT = 120.0
#: Bottom to top within a minute's stack.
KINDS = ("succeeded", "cancelled", "dead")


@dataclass(frozen=True, slots=True)
class Bar:
    kind: str
    minutes_ago: int
    jobs: int
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


def throughput_chart(rows: Iterable[dict[str, Any]], minutes: int = MINUTES) -> Chart:
    """Rows of gauge_finished_recent (queue, state, minutes_ago, jobs), all queues together;
    the current minute is drawn rightmost."""
    per_minute = [dict.fromkeys(KINDS, 0) for _ in range(minutes)]
    for r in rows:
        if r["state"] in KINDS and 0 <= r["minutes_ago"] < minutes:
            per_minute[r["minutes_ago"]][r["state"]] += int(r["jobs"])
    peak = max((sum(m.values()) for m in per_minute), default=0)
    slot = WIDTH / minutes
    bars = []
    for minutes_ago, counts in enumerate(per_minute):
        x = WIDTH - (minutes_ago + 1) * slot
        base = HEIGHT
        for kind in KINDS:
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
    totals = {kind: sum(m[kind] for m in per_minute) for kind in KINDS}
    return Chart(WIDTH, HEIGHT, minutes, peak, totals, bars)

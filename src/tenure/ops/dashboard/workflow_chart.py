"""A workflow's steps as a timeline: one row per step, a bar from its release to its finish (to
now while it runs), on one time axis from the workflow's creation; SVG geometry the template
draws, as the overview's charts are (no charting library, nothing to load)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tenure.model.workflows import WorkflowStep

WIDTH = 600.0
ROW = 14.0
#: Rows drawn at most: a fan-out of thousands is summed up in the table, not drawn step by step.
MAX_ROWS = 200


@dataclass(frozen=True, slots=True)
class StepBar:
    name: str
    state: str
    y: float
    x: float
    width: float
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    width: float
    height: float
    seconds: float
    bars: list[StepBar]
    hidden: int


def step_timeline(created_at: datetime, now: datetime, steps: list[WorkflowStep]) -> Timeline:
    """Each step's bar; a step not released yet has none (its row stays empty)."""
    shown = steps[:MAX_ROWS]
    ends = [s.finished_at or now for s in shown if s.released_at is not None]
    span = max([(e - created_at).total_seconds() for e in ends] + [0.001])
    bars = []
    for row, s in enumerate(shown):
        if s.released_at is None:
            continue
        start = (s.released_at - created_at).total_seconds()
        end = ((s.finished_at or now) - created_at).total_seconds()
        x = WIDTH * max(0.0, start) / span
        width = max(2.0, WIDTH * max(0.0, end - start) / span)
        label = f"{s.name}: {s.shown_state}, released {start:.2f}s in, " + (
            f"took {end - start:.2f}s" if s.finished_at else "not finished"
        )
        bars.append(StepBar(s.name, s.shown_state, row * ROW + 2, min(x, WIDTH - 2.0), width, label))
    return Timeline(WIDTH, max(ROW, len(shown) * ROW), span, bars, max(0, len(steps) - MAX_ROWS))

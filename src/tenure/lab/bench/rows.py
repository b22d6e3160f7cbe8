"""One figure of the result: its value, the baseline measured in the same run, their ratio, and
a target where there is one."""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


def row(
    section: str,
    figure: str,
    value: float | None,
    unit: str,
    baseline: str,
    baseline_value: float | None,
    target: str = "",
    met: bool | None = None,
) -> Row:
    ratio = round(value / baseline_value, 3) if value is not None and baseline_value else None
    return {
        "section": section,
        "figure": figure,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": ratio,
        "target": target,
        "met": met,
    }


def at_least(ratio: float | None, bound: float) -> bool | None:
    return None if ratio is None else ratio >= bound


def at_most(ratio: float | None, bound: float) -> bool | None:
    return None if ratio is None else ratio <= bound


def fmt(value: Any) -> str:
    """A figure for the terminal: thousands separated, small values as they are."""
    if value is None:
        return "-"
    if isinstance(value, float) and value >= 100:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}"

"""One figure of the result: its value, the baseline measured in the same run, their ratio, and
a target where there is one, with the rule that judges it (the targets table judges by the same
rules)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

Row = dict[str, Any]
#: Whether a figure meets its target, from its value and its ratio to the baseline; None when
#: what it judges by was not measured.
Rule = Callable[[float | None, float | None], bool | None]


def ratio(value: float | None, baseline_value: float | None) -> float | None:
    return round(value / baseline_value, 3) if value is not None and baseline_value else None


def row(
    section: str,
    figure: str,
    value: float | None,
    unit: str,
    baseline: str,
    baseline_value: float | None,
    target: str = "",
    rule: Rule | None = None,
) -> Row:
    against = ratio(value, baseline_value)
    return {
        "section": section,
        "figure": figure,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": against,
        "target": target,
        "met": rule(value, against) if rule is not None else None,
    }


def _on_ratio(compare: Callable[[float, float], bool]) -> Callable[[float], Rule]:
    """Rules that compare the ratio with a bound."""
    return lambda bound: lambda _value, ratio: None if ratio is None else compare(ratio, bound)


def _on_value(compare: Callable[[float, float], bool]) -> Callable[[float], Rule]:
    """Rules that compare the value itself with a bound."""
    return lambda bound: lambda value, _ratio: None if value is None else compare(value, bound)


ratio_at_least = _on_ratio(operator.ge)
ratio_at_most = _on_ratio(operator.le)
ratio_below = _on_ratio(operator.lt)
ratio_above = _on_ratio(operator.gt)
value_at_least = _on_value(operator.ge)
value_at_most = _on_value(operator.le)
value_below = _on_value(operator.lt)


def fmt(value: Any) -> str:
    """A figure for the terminal: thousands separated, small values as they are."""
    if value is None:
        return "-"
    if isinstance(value, float) and value >= 100:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}"

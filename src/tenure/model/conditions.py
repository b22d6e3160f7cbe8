"""A workflow step's condition: what it waits for once its dependencies have succeeded (a signal
to a key, a time), and what skips or cancels it instead (docs/workflows.md, "Steps that wait for
the world").

    approve = wf.step(charge.bind(order=7), after=reserved,
                      wait_for=Signalled("approval:order-7"),
                      cancel_if=Elapsed(timedelta(days=3)))

A step's condition is one wait, kept in the database: at most one signal key and one deadline,
each with what it does when it comes first: run the step (`wait_for`), skip it (`skip_if`: it
succeeds without running, with no result, and the steps after it go on), or cancel it
(`cancel_if`: the steps after it are cancelled with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tenure.model.errors import ValidationError
from tenure.model.waits import MAX_WAIT, check_signal_key, seconds_of


@dataclass(frozen=True, slots=True)
class Signalled:
    """A signal to `key` (`app.signal(key, payload)`, `tenure signal`, or SQL's signal()). A signal
    sent before the step was released is kept for it, as for any wait."""

    key: str

    def __post_init__(self) -> None:
        check_signal_key(self.key, "condition's signal key")


@dataclass(frozen=True, slots=True)
class Elapsed:
    """A time: `duration` (seconds or a timedelta) after the step is released, its dependencies
    having succeeded."""

    duration: float | timedelta

    @property
    def seconds(self) -> float:
        seconds = seconds_of(self.duration, "a condition's duration", MAX_WAIT, optional=False)
        assert seconds is not None
        return seconds

    def __post_init__(self) -> None:
        _ = self.seconds


Condition = Signalled | Elapsed
#: What a condition does when it comes first, by the argument that names it.
ENDINGS = {"wait_for": "resume", "skip_if": "skip", "cancel_if": "cancel"}


def _listed(argument: str, given: Condition | Sequence[Condition] | None) -> list[Condition]:
    if given is None:
        return []
    items: list[object] = list(given) if isinstance(given, (list, tuple)) else [given]
    conditions: list[Condition] = []
    for item in items:
        if not isinstance(item, (Signalled, Elapsed)):
            raise ValidationError(
                f"{argument}= takes Signalled(key), Elapsed(duration) or a list of them, got {item!r}"
            )
        conditions.append(item)
    return conditions


def step_condition(
    wait_for: Condition | Sequence[Condition] | None,
    skip_if: Condition | Sequence[Condition] | None,
    cancel_if: Condition | Sequence[Condition] | None,
) -> dict[str, Any] | None:
    """The step's condition as enqueue_workflow() stores it, or None when it has none. Refuses
    what one wait cannot keep: two signal keys, two times, or nothing that lets the step run."""
    named = [
        (ENDINGS[argument], condition)
        for argument, given in (("wait_for", wait_for), ("skip_if", skip_if), ("cancel_if", cancel_if))
        for condition in _listed(argument, given)
    ]
    if not named:
        return None
    signals = [(ending, c) for ending, c in named if isinstance(c, Signalled)]
    times = [(ending, c) for ending, c in named if isinstance(c, Elapsed)]
    if len(signals) > 1:
        raise ValidationError(
            f"a step's condition waits for one signal key, got {len(signals)}: "
            f"{', '.join(repr(c.key) for _, c in signals)}; send one key, and let its payload say "
            "what was decided (the handler reads it with ctx.step_condition())"
        )
    if len(times) > 1:
        raise ValidationError(
            f"a step's condition has one deadline, got {len(times)}: keep the one that matters"
        )
    if not any(ending == "resume" for ending, _ in named):
        raise ValidationError(
            "this step's condition never lets it run: skip_if= and cancel_if= say what ends it "
            "otherwise; add wait_for= (a signal or a time) for what runs it"
        )
    condition: dict[str, Any] = {}
    for ending, c in signals:
        condition.update(key=c.key, on_signal=ending)
    for ending, t in times:
        condition.update(seconds=t.seconds, on_deadline=ending)
    return condition

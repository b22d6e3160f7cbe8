"""Task policies are checked and normalised when a task is registered, not when a job is claimed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tenure import Backoff, ConfigurationError, JobContext, TaskPolicy, Tenure


def handler(ctx: JobContext) -> None:
    return None


def test_integer_seconds_are_stored_as_floats() -> None:
    """lease_seconds=30 and max_runtime_seconds=3600 (ints, as in the README) become floats."""
    app = Tenure("postgresql://unused")
    task = app.task(handler, name="files.resize", lease_seconds=30, max_runtime_seconds=3600)
    assert (task.policy.lease_seconds, task.policy.max_runtime_seconds) == (30.0, 3600.0)
    assert type(task.policy.lease_seconds) is float and type(task.policy.max_runtime_seconds) is float
    plain = app.task(handler, name="files.plain")
    assert plain.policy.lease_seconds is None and plain.policy.max_runtime_seconds is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lease_seconds", True),
        ("lease_seconds", math.nan),
        ("lease_seconds", math.inf),
        ("lease_seconds", "30"),
        ("lease_seconds", 0),
        ("max_runtime_seconds", -1.5),
        ("max_runtime_seconds", -math.inf),
        ("max_runtime_seconds", [3600]),
    ],
)
def test_bad_seconds_are_refused_naming_task_field_and_fix(field: str, value: Any) -> None:
    """A bool, NaN, infinity, non-number or non-positive value is refused at registration."""
    app = Tenure("postgresql://unused")
    with pytest.raises(ConfigurationError) as info:
        app.task(handler, name="files.resize", **{field: value})
    message = str(info.value)
    assert "task 'files.resize'" in message and field in message
    assert "positive, finite number of seconds (for example 30)" in message
    assert app.registry.get("files.resize") is None


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_attempts": True}, "max_attempts must be an integer from 1 to 1000"),
        ({"max_attempts": 2.0}, "max_attempts must be an integer from 1 to 1000"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 1000"),
        ({"priority": False}, "priority must be an integer from -32768 to 32767"),
        ({"priority": 40000}, "priority must be an integer from -32768 to 32767"),
        ({"backoff": 5}, "backoff must be a tenure.Backoff"),
        ({"failure": "permanent"}, "failure must be a tenure.FailurePolicy"),
        ({"queue": "no spaces"}, "invalid queue name"),
        ({"lease": 30}, "unknown policy option(s) 'lease'; the options are queue, priority"),
    ],
)
def test_other_bad_policy_values_are_refused_with_the_task_named(
    options: dict[str, Any], problem: str
) -> None:
    """Bad attempts, priorities, backoffs, failure policies, queues and unknown options name the task."""
    app = Tenure("postgresql://unused")
    with pytest.raises(ConfigurationError) as info:
        app.task(handler, name="mail.send", **options)
    assert str(info.value).startswith("task 'mail.send': ") and problem in str(info.value)


def test_changing_a_policy_later_is_checked_and_normalised_too() -> None:
    """registry.with_policy applies the same checks and normalisation as registration."""
    app = Tenure("postgresql://unused")
    app.task(handler, name="t")
    assert app.registry.with_policy("t", lease_seconds=5).policy.lease_seconds == 5.0
    with pytest.raises(ConfigurationError, match="task 't': lease_seconds"):
        app.registry.with_policy("t", lease_seconds=math.nan)
    assert app.registry.get("t").policy.lease_seconds == 5.0  # type: ignore[union-attr]


def test_backoff_numbers_are_floats_and_bools_are_refused() -> None:
    """Backoff(base=1, cap=300, jitter=0) holds floats; a bool for any of them is refused."""
    backoff = Backoff(base=1, cap=300, jitter=0)
    assert [type(v) for v in (backoff.base, backoff.cap, backoff.jitter)] == [float, float, float]
    for field in ("base", "cap", "jitter"):
        with pytest.raises(ConfigurationError, match=f"backoff {field}"):
            Backoff(**{field: True})


def test_a_policy_built_directly_is_normalised() -> None:
    """TaskPolicy(...) outside a registry normalises and refuses the same way."""
    assert TaskPolicy(lease_seconds=7).lease_seconds == 7.0
    with pytest.raises(ConfigurationError, match="max_runtime_seconds"):
        TaskPolicy(max_runtime_seconds=math.inf)

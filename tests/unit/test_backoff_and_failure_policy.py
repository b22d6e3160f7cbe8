"""Backoff arithmetic and the failure classification that decides retries, no database."""

from __future__ import annotations

import random

import psycopg
import pytest

from tenure import Backoff, ConfigurationError, FailureClass, FailurePolicy, Permanent, Transient
from tenure.model.errors import LeaseLost
from tenure.model.retry import error_code


class FixedDraw(random.Random):
    """A random source whose every draw is `value`, to hit the jitter bounds exactly."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_backoff_doubles_per_attempt_without_jitter() -> None:
    """With no jitter the delay is base * 2^(attempt-1)."""
    b = Backoff(base=0.5, cap=1000.0, jitter=0.0)
    assert [b.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_backoff_is_capped_at_any_attempt_number() -> None:
    """The cap bounds the delay, even for attempt numbers whose raw delay overflows a float."""
    b = Backoff(base=1.0, cap=30.0, jitter=0.0)
    assert b.delay(5) == 16.0
    assert b.delay(6) == 30.0
    assert b.delay(100) == 30.0
    assert b.delay(5000) == 30.0


def test_backoff_attempt_zero_or_negative_uses_base() -> None:
    """Attempt numbers below 1 are treated as the first attempt, never as a fraction of the base."""
    b = Backoff(base=2.0, cap=100.0, jitter=0.0)
    assert b.delay(0) == 2.0 and b.delay(-3) == 2.0


@pytest.mark.parametrize("jitter", [0.0, 0.25, 0.5, 1.0])
def test_backoff_jitter_stays_within_bounds(jitter: float) -> None:
    """Jitter takes off at most `jitter` of the raw delay, never adds to it, never goes negative."""
    b = Backoff(base=1.0, cap=8.0, jitter=jitter)
    for attempt in range(1, 8):
        raw = min(8.0, 2.0 ** (attempt - 1))
        assert b.delay(attempt, FixedDraw(0.0)) == raw
        assert b.delay(attempt, FixedDraw(0.999999)) == pytest.approx(raw * (1 - jitter * 0.999999))
        rng = random.Random(attempt)
        for _ in range(200):
            d = b.delay(attempt, rng)
            assert raw * (1 - jitter) - 1e-12 <= d <= raw


def test_backoff_jitter_actually_spreads_delays() -> None:
    """Two draws with jitter differ, so retries of many jobs do not land at the same instant."""
    b = Backoff(base=1.0, cap=10.0, jitter=0.5)
    rng = random.Random(7)
    assert len({b.delay(3, rng) for _ in range(20)}) > 10


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"base": -1.0}, "base"),
        ({"cap": -1.0}, "cap"),
        ({"base": float("nan")}, "base"),
    ],
)
def test_backoff_rejects_settings_that_would_give_negative_or_nonsense_delays(
    kwargs: dict[str, float], word: str
) -> None:
    """Backoff settings outside their range are refused with a message naming the setting."""
    with pytest.raises(ConfigurationError, match=word):
        Backoff(**kwargs)


# -- FailurePolicy.retry_delay ------------------------------------------------------------------

NO_JITTER = Backoff(base=1.0, cap=60.0, jitter=0.0)


def test_permanent_failure_is_dead_at_once() -> None:
    """A permanent failure gets no retry, whatever budget is left."""
    assert FailurePolicy().retry_delay(FailureClass.PERMANENT, 1, 20, NO_JITTER) is None


def test_transient_failure_retries_with_backoff_until_budget_spent() -> None:
    """A transient failure retries with the backoff delay until the attempt budget is spent."""
    policy = FailurePolicy(unknown_budget=2)
    assert [policy.retry_delay(FailureClass.TRANSIENT, n, 5, NO_JITTER) for n in range(1, 6)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        None,
    ]


def test_unknown_failure_uses_the_small_budget() -> None:
    """An unknown failure retries only until unknown_budget attempts, even with a large max_attempts."""
    policy = FailurePolicy(unknown_budget=3)
    delays = [policy.retry_delay(FailureClass.UNKNOWN, n, 20, NO_JITTER) for n in range(1, 5)]
    assert delays == [1.0, 2.0, None, None]
    assert policy.retry_delay(FailureClass.UNKNOWN, 1, 1, NO_JITTER) is None  # max_attempts still bounds


def test_requested_delay_overrides_backoff_but_not_the_budget() -> None:
    """Transient(delay=...) sets the next delay, but a spent budget is still dead."""
    policy = FailurePolicy()
    assert policy.retry_delay(FailureClass.TRANSIENT, 1, 3, NO_JITTER, requested_delay=7.5) == 7.5
    assert policy.retry_delay(FailureClass.TRANSIENT, 3, 3, NO_JITTER, requested_delay=7.5) is None


# -- classification ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Permanent("bad payload"), FailureClass.PERMANENT),
        (Transient("try later"), FailureClass.TRANSIENT),
        (psycopg.errors.SerializationFailure(), FailureClass.TRANSIENT),
        (psycopg.errors.DeadlockDetected(), FailureClass.TRANSIENT),
        (psycopg.errors.LockNotAvailable(), FailureClass.TRANSIENT),
        (psycopg.errors.AdminShutdown(), FailureClass.TRANSIENT),
        (psycopg.OperationalError("connection lost"), FailureClass.TRANSIENT),
        (psycopg.errors.UniqueViolation(), FailureClass.UNKNOWN),
        (TimeoutError(), FailureClass.TRANSIENT),
        (ConnectionResetError(), FailureClass.TRANSIENT),
        (LeaseLost(1, 1), FailureClass.TRANSIENT),
        (ValueError("boom"), FailureClass.UNKNOWN),
        (KeyError("k"), FailureClass.UNKNOWN),
    ],
)
def test_builtin_classification(exc: BaseException, expected: FailureClass) -> None:
    """Declared classes hold; 40001/40P01/55P03 and lost connections are transient; the rest unknown."""
    assert FailurePolicy().classify(exc) is expected


def test_classification_is_extensible() -> None:
    """User classifiers run first (None falls through); permanent/transient tuples come next."""

    def by_message(exc: BaseException) -> FailureClass | None:
        return FailureClass.TRANSIENT if "rate limited" in str(exc) else None

    policy = FailurePolicy(classifiers=[by_message], permanent=(KeyError,), transient=(ValueError,))
    assert policy.classify(RuntimeError("rate limited")) is FailureClass.TRANSIENT
    assert policy.classify(RuntimeError("other")) is FailureClass.UNKNOWN
    assert policy.classify(KeyError("missing")) is FailureClass.PERMANENT
    assert policy.classify(ValueError("flaky")) is FailureClass.TRANSIENT
    # A classifier can even overrule a declared class.
    overrule = FailurePolicy(classifiers=[lambda e: FailureClass.PERMANENT])
    assert overrule.classify(Transient("x")) is FailureClass.PERMANENT


def test_error_codes_are_short_and_stable() -> None:
    """Error codes: JobFailure's code, SQLSTATE_xxxxx for database errors, else the class name."""
    assert error_code(Permanent("x", code="BAD_VERSION")) == "BAD_VERSION"
    assert error_code(Transient("x")) == "TRANSIENT"
    assert error_code(psycopg.errors.DeadlockDetected()) == "SQLSTATE_40P01"
    assert error_code(ValueError()) == "ValueError"

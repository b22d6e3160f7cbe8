"""The client's limit on wake-up notifications after its own commits (tenure.db.wakeups)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tenure.db import wakeups
from tenure.db.wakeups import NotifyLimiter, Wakeups


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(wakeups.time, "monotonic", fake)
    return fake


def test_a_queue_is_notified_once_per_cooldown_and_others_are_not_held_back(clock: Clock) -> None:
    """Within NOTIFY_COOLDOWN of a confirmed notification of a queue, the limiter leaves that
    queue out, not others."""
    limiter = NotifyLimiter()
    first = limiter.admit(Wakeups({"a"}))
    assert first.wakeups.queues == {"a"}
    limiter.sent(first)
    clock.now += wakeups.NOTIFY_COOLDOWN / 2
    second = limiter.admit(Wakeups({"a", "b"}))
    assert second.wakeups.queues == {"b"}
    limiter.sent(second)
    clock.now += wakeups.NOTIFY_COOLDOWN / 2
    assert limiter.admit(Wakeups({"a", "b"})).wakeups.queues == {"a"}


def test_a_notification_that_failed_or_was_cancelled_holds_nothing_back(clock: Clock) -> None:
    """A notification never confirmed (its send failed, or was cancelled) does not count: the
    next commit's goes out, so the job it would have covered waits no poll interval."""
    limiter = NotifyLimiter()
    limiter.admit(Wakeups({"a"}))
    clock.now += wakeups.NOTIFY_COOLDOWN / 10
    assert limiter.admit(Wakeups({"a"})).wakeups.queues == {"a"}


def test_a_notification_in_flight_holds_nothing_back(clock: Clock) -> None:
    """Two commits whose notifications overlap both send: the first is not yet confirmed."""
    limiter = NotifyLimiter()
    first = limiter.admit(Wakeups({"a"}))
    second = limiter.admit(Wakeups({"a"}))
    assert first.wakeups.queues == second.wakeups.queues == {"a"}
    limiter.sent(second)
    limiter.sent(first)  # confirmed late: the cooldown still runs from the later admission
    clock.now += wakeups.NOTIFY_COOLDOWN / 2
    assert limiter.admit(Wakeups({"a"})).wakeups.queues == set()


def test_scheduled_hints_are_never_left_out(clock: Clock) -> None:
    """A hint for jobs scheduled later always goes, whatever was sent just before."""
    limiter = NotifyLimiter()
    due = datetime.now(UTC) + timedelta(minutes=5)
    limiter.sent(limiter.admit(Wakeups({"a"})))
    admitted = limiter.admit(Wakeups({"a"}, due)).wakeups
    assert admitted.queues == set() and admitted.first_scheduled == due and admitted


def test_wakeups_keep_the_earliest_scheduled_time_and_only_due_queues() -> None:
    """Jobs due now name their queue; scheduled ones only move the earliest due time."""
    now = datetime.now(UTC)
    w = Wakeups()
    assert not w
    w.add("later", now + timedelta(hours=1), scheduled=True)
    w.add("later", now + timedelta(minutes=1), scheduled=True)
    w.add("now", now, scheduled=False)
    assert w.queues == {"now"} and w.first_scheduled == now + timedelta(minutes=1)


def test_a_lone_insert_notifies_in_its_commit_only_once_the_queue_has_rested(clock: Clock) -> None:
    """admit_at_rest admits a queue never seen at once, then only after INLINE_QUIET without a
    confirmed notification of it, though the cooldown alone would admit it sooner."""
    limiter = NotifyLimiter()
    quiet = wakeups.INLINE_QUIET
    assert quiet > wakeups.NOTIFY_COOLDOWN
    first = limiter.admit_at_rest("a")
    assert first is not None and first.wakeups.queues == {"a"}
    limiter.sent(first)
    clock.now += quiet
    limiter.sent(limiter.admit(Wakeups({"a"})))  # a commit's notification after it, confirmed
    clock.now += wakeups.NOTIFY_COOLDOWN * 1.5
    assert limiter.admit(Wakeups({"a"})).wakeups.queues == {"a"}
    assert limiter.admit_at_rest("a") is None
    clock.now += quiet * 1.01  # a step past it: the clock is a float
    assert limiter.admit_at_rest("a") is not None


def test_of_enqueues_that_begin_together_only_the_first_notifies_in_its_commit(clock: Clock) -> None:
    """Concurrent lone enqueues after a quiet spell: the first is admitted, the others (asked
    before its notification was confirmed) are not, nor is another queue held back by them."""
    limiter = NotifyLimiter()
    assert limiter.admit_at_rest("a") is not None
    assert [limiter.admit_at_rest("a") for _ in range(9)] == [None] * 9
    assert limiter.admit_at_rest("b") is not None


def test_a_steady_flow_never_rests_though_its_notifications_confirm_late(clock: Clock) -> None:
    """Enqueues closer together than INLINE_QUIET keep their queue from resting, whatever the
    notifications did: under load no insert notifies inside its commit (each would hold
    PostgreSQL's notify lock through its flush)."""
    limiter = NotifyLimiter()
    assert limiter.admit_at_rest("a") is not None
    for _ in range(20):
        clock.now += wakeups.INLINE_QUIET / 2
        assert limiter.admit_at_rest("a") is None
    clock.now += wakeups.INLINE_QUIET * 1.01
    assert limiter.admit_at_rest("a") is not None

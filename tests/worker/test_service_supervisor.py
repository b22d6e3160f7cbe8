"""The one supervisor loop every worker service runs under, stepped with a fake clock: failures
are counted, backed off and recovered from, `until` ends a loop only between passes, and the
health watch gives up on a critical service that keeps failing."""

from __future__ import annotations

import asyncio
import logging

import pytest
from _clock import FakeClock

from tenure.worker.health import ServiceHealth, ServiceHealthBoard
from tenure.worker.service import HealthWatch, Service, Supervisor, set_within


class Flaky(Service):
    """Fails `failures` times, then succeeds; stops the test after `passes` passes."""

    name = "flaky"

    def __init__(self, failures: int, passes: int, clock: FakeClock) -> None:
        self.health = ServiceHealth(self.name, critical=True)
        self.clock = clock
        self.failures = failures
        self.passes = passes
        self.calls = 0
        self.stopped_calls = 0
        self.done = asyncio.Event()

    async def run_once(self) -> int:
        self.calls += 1
        if self.calls >= self.passes:
            self.done.set()
        if self.calls <= self.failures:
            raise ConnectionError(f"down ({self.calls})")
        return self.calls

    def next_delay(self, result: int) -> float:
        return 1.0

    async def stopped(self) -> None:
        self.stopped_calls += 1


async def test_a_failing_service_backs_off_then_recovers_and_its_health_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three failures wait 0.2, 0.4 and 0.8 s (the backoff), each logged and counted; the success
    after them clears the failing state and the loop goes on at the service's own pace."""
    caplog.set_level(logging.INFO, logger="tenure.worker")
    clock = FakeClock()
    service = Flaky(failures=3, passes=5, clock=clock)
    supervisor = Supervisor()
    supervisor.start(service)
    await asyncio.wait_for(service.done.wait(), 5)
    await supervisor.close()
    assert clock.slept[:4] == [0.2, 0.4, 0.8, 1.0]
    assert service.health.total_failures == 3 and not service.health.failing
    assert "flaky failed (1 in a row, next try in 0.2s): ConnectionError: down (1)" in caplog.text
    assert "flaky recovered after 3 failures" in caplog.text
    assert service.stopped_calls == 1  # told when its loop ended


async def test_until_ends_the_loop_between_passes_never_inside_one() -> None:
    """A service started with `until` finishes the pass under way when the event is set, then
    its loop ends on its own (the claimer's claim is never cut in half)."""
    until = asyncio.Event()
    entered, release = asyncio.Event(), asyncio.Event()
    finished: list[int] = []

    class Slow(Service):
        name = "slow"

        def __init__(self) -> None:
            self.health = ServiceHealth(self.name, critical=True)

        async def run_once(self) -> None:
            entered.set()
            await release.wait()
            finished.append(1)

        def next_delay(self, result: None) -> float:
            return 0.0

    supervisor = Supervisor()
    slow = Slow()
    supervisor.start(slow, until=until)
    await asyncio.wait_for(entered.wait(), 5)
    until.set()
    release.set()
    await asyncio.wait_for(supervisor.finish(slow), 5)
    assert finished == [1]


async def test_the_health_watch_gives_up_on_a_critical_service_failing_too_long() -> None:
    """Past the failure limit the watch calls `give_up` with the service and its last error."""
    board = ServiceHealthBoard(failure_limit=0.0)
    board.service("claimer").failed(ConnectionError("refused"))
    reasons: list[str] = []
    watch = HealthWatch(board, reasons.append, every=1.0)
    await asyncio.sleep(0.01)
    assert await watch.run_once() is not None
    assert reasons and "the claimer has failed" in reasons[0] and "refused" in reasons[0]
    board.service("claimer").succeeded()
    assert await watch.run_once() is None


class LosesCancels(Service):
    """Sleeps an hour in its pass (`in_pass`) or in its wait before the next one; the first
    `lose` cancellations that reach that sleep are lost there, as 3.11's asyncio.wait_for loses
    one when what it waited on ends in the same turn. After a lost one the pass returns, while
    the wait sleeps on."""

    name = "loser"

    def __init__(self, lose: int, *, in_pass: bool) -> None:
        self.health = ServiceHealth(self.name, critical=False)
        self.lose = lose
        self.sleeps_in_pass = in_pass
        self.lost = 0
        self.stopped_calls = 0
        self.sleeping = asyncio.Event()

    async def _sleep(self, *, return_when_lost: bool) -> None:
        self.sleeping.set()
        while True:
            try:
                await asyncio.sleep(3600)
                return
            except asyncio.CancelledError:
                if self.lost >= self.lose:
                    raise
                self.lost += 1
                if return_when_lost:
                    return

    async def run_once(self) -> None:
        if self.sleeps_in_pass:
            await self._sleep(return_when_lost=True)

    def next_delay(self, result: None) -> float:
        return 3600.0

    async def wait(self, delay: float) -> None:
        await self._sleep(return_when_lost=False)

    async def stopped(self) -> None:
        self.stopped_calls += 1


async def closes(supervisor: Supervisor, within: float = 5.0) -> bool:
    """Whether `supervisor.close()` returns within `within` seconds; it is not cancelled (a close
    that swallows its own cancellation would look done)."""
    closing = asyncio.ensure_future(supervisor.close())
    done, _ = await asyncio.wait({closing}, timeout=within)
    return closing in done


async def test_a_loop_whose_cancellation_was_lost_in_a_pass_ends_at_its_next_check() -> None:
    """A pass that loses the close's cancellation and returns ends its loop at the next check,
    instead of waiting out its hour-long delay: the close returns, and `stopped` was told."""
    service = LosesCancels(1, in_pass=True)
    supervisor = Supervisor()
    supervisor.start(service)
    await service.sleeping.wait()
    assert await closes(supervisor)
    assert service.lost == 1 and service.stopped_calls == 1


async def test_a_loop_whose_cancellation_was_lost_in_its_wait_is_cancelled_again() -> None:
    """A wait that loses the close's cancellation and sleeps on is cancelled again, and ends."""
    service = LosesCancels(1, in_pass=False)
    supervisor = Supervisor()
    supervisor.start(service)
    await service.sleeping.wait()
    assert await closes(supervisor)
    assert service.lost == 1 and service.stopped_calls == 1


async def test_a_loop_that_never_ends_is_left_behind_with_an_error(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that loses every cancellation is left running after CLOSE_PATIENCE, with an error
    naming its service: the worker's stop goes on without it."""
    monkeypatch.setattr("tenure.worker.service.CLOSE_PATIENCE", 0.3)
    service = LosesCancels(1_000_000, in_pass=False)
    supervisor = Supervisor()
    task = supervisor.start(service)
    await service.sleeping.wait()
    assert await closes(supervisor)
    assert not task.done() and service.lost >= 2  # cancelled again, in vain
    assert "loser did not stop within 0.3s of being cancelled: it is left running" in caplog.text
    service.lose = 0  # the test's own cancel ends it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_close_cancelled_by_its_caller_raises_there() -> None:
    """Cancelling close() itself (its caller's own timeout) raises CancelledError in the caller:
    the close never swallows a cancellation meant for it."""
    service = LosesCancels(1_000_000, in_pass=False)
    supervisor = Supervisor()
    task = supervisor.start(service)
    await service.sleeping.wait()
    closing = asyncio.ensure_future(supervisor.close())
    await asyncio.sleep(0.05)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    service.lose = 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_set_within_says_whether_the_event_came_and_keeps_a_cancellation() -> None:
    """set_within is True for an event set before or during the wait, False after its timeout,
    and a cancellation that comes in the same turn as the event raises instead of being lost."""
    event = asyncio.Event()
    assert await set_within(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await set_within(event, 5) is True
    assert await set_within(event, None) is True  # already set

    event.clear()
    waiting = asyncio.ensure_future(set_within(event, 5))
    await asyncio.sleep(0)  # the wait has begun
    event.set()
    waiting.cancel()  # in the same turn: asyncio.wait_for on 3.11 would return True here
    with pytest.raises(asyncio.CancelledError):
        await waiting

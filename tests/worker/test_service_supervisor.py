"""The one supervisor loop every worker service runs under, stepped with a fake clock: failures
are counted, backed off and recovered from, `until` ends a loop only between passes, and the
health watch gives up on a critical service that keeps failing."""

from __future__ import annotations

import asyncio
import logging

import pytest
from _clock import FakeClock

from tenure.worker.health import ServiceHealth, ServiceHealthBoard
from tenure.worker.service import HealthWatch, Service, Supervisor


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

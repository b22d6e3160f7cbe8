"""One shape for every long-lived service of a worker, and the one loop that runs them all.

A service does one pass at a time (`run_once`) and says how long to wait before the next
(`next_delay`); it may wake earlier than that (`wait`: the claimer when a job is enqueued, the
promoter when one is scheduled sooner). The `Supervisor` owns everything else, the same for every
service: an exception is logged with its cause, counted in the service's health (which `tenure
status` and the metrics show, and which stops the worker when a critical service keeps failing),
and followed by the service's retry delay, a capped exponential backoff unless it says otherwise;
the loop goes on. Adding a service means writing a class, not a loop.

Local time comes from the service's `clock` (tests give one they move by hand); database time
comes from the statements, and each service's `run_once(now=...)` takes it for tests.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from tenure.worker.health import ServiceHealth, ServiceHealthBoard, describe_error

log = logging.getLogger("tenure.worker")

#: How long `Supervisor.close` keeps cancelling a loop that has not ended before it leaves the
#: loop behind, with an error naming its service (seconds).
CLOSE_PATIENCE = 5.0
#: How often it cancels such a loop again meanwhile (seconds).
CANCEL_AGAIN_EVERY = 0.1


class Clock(Protocol):
    """Local time: the monotonic clock and a sleep on it."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The process's own monotonic clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class Service(abc.ABC):
    """The base of every worker service: implement `run_once` and `next_delay`, and override the
    hooks where the service needs them. `health` is the service's entry on the worker's health board."""

    name: str
    health: ServiceHealth
    clock: Clock = SYSTEM_CLOCK

    @abc.abstractmethod
    async def run_once(self) -> Any:
        """One pass; what it did (given to `next_delay`). An exception is the supervisor's."""

    @abc.abstractmethod
    def next_delay(self, result: Any) -> float:
        """Seconds until the next pass after one that returned `result`."""

    async def wait(self, delay: float) -> None:
        """Waits `delay` seconds before the next pass, or less when there is work sooner."""
        await self.clock.sleep(delay)

    def failed(self, exc: BaseException) -> float:
        """Seconds until the next pass after one that raised `exc` (already counted in `health`
        and logged): the backoff. A service with counters or state to reset does it here."""
        return self.health.backoff()

    async def stopped(self) -> None:  # noqa: B027 - a hook: most services have nothing to say
        """The service's loop ended (the worker stops): its last words, bounded in time."""


async def set_within(event: asyncio.Event, timeout: float | None) -> bool:
    """Waits for `event` for at most `timeout` seconds (None: for as long as it takes) and says
    whether it is set. Unlike `asyncio.wait_for` on Python 3.11, a cancellation that comes as
    the event is set is never lost, and no task is made for the wait."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
    return event.is_set()


class Supervisor:
    """Runs services, each in a loop of its own, until they are stopped."""

    def __init__(self) -> None:
        self._tasks: dict[Service, asyncio.Task[None]] = {}
        self._closing = False
        #: Services whose loop has ended and whose `stopped` hook runs: not cancelled again.
        self._ended: set[Service] = set()

    def start(self, service: Service, *, until: asyncio.Event | None = None) -> asyncio.Task[None]:
        """Runs `service` in the background: for ever, or until `until` is set (checked between
        passes, so a pass under way, a claim, is never cut in half)."""
        task = asyncio.get_running_loop().create_task(self.run(service, until), name=f"tenure-{service.name}")
        self._tasks[service] = task
        return task

    async def run(self, service: Service, until: asyncio.Event | None = None) -> None:
        """`service`'s loop: a pass, its delay, a pass; an exception never ends it."""
        health = service.health
        try:
            while not self._ending(until):
                try:
                    result = await service.run_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    health.failed(exc)
                    delay = service.failed(exc)
                    _log_failure(service, exc, delay)
                else:
                    health.succeeded()
                    delay = service.next_delay(result)
                if delay > 0 and not self._ending(until):
                    await service.wait(delay)
        finally:
            self._ended.add(service)
            await service.stopped()

    def _ending(self, until: asyncio.Event | None) -> bool:
        return self._closing or (until is not None and until.is_set())

    async def finish(self, service: Service) -> None:
        """Waits for the loop of a service started with `until` to end on its own."""
        await self._tasks.pop(service)

    async def close(self) -> None:
        """Cancels every loop still running and waits for each to end.

        A cancellation can be lost: on Python 3.11, `asyncio.wait_for` returns what it waited on,
        instead of raising, when that ended in the same turn of the event loop as the cancel
        came (so may a library's wait built on it). Such a loop ends at its next check, and one
        lost inside a long wait is cancelled again (never a `stopped` hook under way); a loop
        still running after CLOSE_PATIENCE is left behind with an error naming its service. One
        service never hangs a worker's stop."""
        self._closing = True
        tasks, self._tasks = self._tasks, {}
        pending = set(tasks.values())
        deadline = time.monotonic() + CLOSE_PATIENCE
        for task in pending:
            task.cancel()
        while pending and (left := deadline - time.monotonic()) > 0:
            _, pending = await asyncio.wait(pending, timeout=min(CANCEL_AGAIN_EVERY, left))
            for service, task in tasks.items():
                if task in pending and service not in self._ended:
                    task.cancel()  # its cancellation was lost, and it still waits inside its loop
        for service, task in tasks.items():
            if not task.done():
                log.error(
                    "%s did not stop within %gs of being cancelled: it is left running",
                    service.name,
                    CLOSE_PATIENCE,
                )
            elif not task.cancelled() and (exc := task.exception()) is not None:
                log.warning("%s failed as it stopped: %s", service.name, describe_error(exc))


class HealthWatch(Service):
    """Gives up on the worker (`give_up`, with the reason) once a critical service has failed
    for longer than the board allows, or met a fault no retry can mend."""

    name = "health watch"

    def __init__(self, board: ServiceHealthBoard, give_up: Callable[[str], None], *, every: float) -> None:
        self.board = board
        self.give_up = give_up
        self.every = every
        self.health = board.service(self.name, critical=False)

    async def run_once(self) -> str | None:
        reason = self.board.fatal()
        if reason is not None:
            self.give_up(reason)
        return reason

    def next_delay(self, result: str | None) -> float:
        return self.every


def _log_failure(service: Service, exc: BaseException, delay: float) -> None:
    failures = service.health.consecutive_failures
    # The first, tenth and hundredth failure in a row stand out; a traceback only for the first
    # one that is not the database's (a bug, not an outage).
    level = logging.ERROR if failures in (1, 10, 100) else logging.WARNING
    log.log(
        level,
        "%s failed (%s in a row, next try in %.1fs): %s",
        service.name,
        failures,
        delay,
        describe_error(exc),
        exc_info=failures == 1 and not isinstance(exc, psycopg.Error),
    )

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


class Supervisor:
    """Runs services, each in a loop of its own, until they are stopped."""

    def __init__(self) -> None:
        self._tasks: dict[Service, asyncio.Task[None]] = {}

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
            while until is None or not until.is_set():
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
                if delay > 0 and (until is None or not until.is_set()):
                    await service.wait(delay)
        finally:
            await service.stopped()

    async def finish(self, service: Service) -> None:
        """Waits for the loop of a service started with `until` to end on its own."""
        await self._tasks.pop(service)

    async def close(self) -> None:
        """Cancels every loop still running and waits for each to end."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


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

"""A time limit for one block at a time, kept on one timer from block to block.

`asyncio.timeout` makes a timer as its block begins and cancels it as the block ends. The
cancelled timer stays in the event loop's heap until its time comes (the whole bound, seconds
later): a loop that runs a bounded statement every few milliseconds keeps the heap full of dead
timers, and every timer that any part of the worker sets or the loop pops compares its way through
them (an idle worker's way from a notification to its handler passed some twenty such
comparisons). A RollingDeadline sets its timer once; when the timer fires it looks at the block
under way, if any, and either cancels it, its time being up, or sets itself for that block's end.
Blocks that come more often than the bound share one timer.

Its cancellation is asyncio.timeout's: the block's task is cancelled, and the block's end turns
that cancellation, and only that one, into TimeoutError."""

from __future__ import annotations

import asyncio
from typing import Any


class RollingDeadline:
    """Bounds one block at a time to `seconds`: `start()` as it begins, `end()` as it ends."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._timer: asyncio.TimerHandle | None = None
        #: The task whose block is under way, and when its time is up (the loop's clock).
        self._task: asyncio.Task[Any] | None = None
        self._deadline = 0.0
        #: The task's pending cancellations as its block began (asyncio.timeout's rule: only a
        #: cancellation of the deadline's own becomes TimeoutError).
        self._cancelling = 0
        self._expired = False

    def start(self) -> None:
        """A block of the current task begins."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a RollingDeadline bounds a block of a task")
        self._task, self._cancelling, self._expired = task, task.cancelling(), False
        self._deadline = loop.time() + self.seconds
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._due)

    def end(self, error: BaseException | None) -> BaseException | None:
        """The block ends, with `error` (None: it returned). Returns what it should raise: a
        TimeoutError, caused by `error`, when `error` is the deadline's own cancellation; else
        `error` itself."""
        task, self._task = self._task, None
        if not self._expired or task is None:
            return error
        self._expired = False
        if task.uncancel() <= self._cancelling and isinstance(error, asyncio.CancelledError):
            timeout = TimeoutError()
            timeout.__cause__ = error
            return timeout
        return error

    def _due(self) -> None:
        self._timer = None
        task = self._task
        if task is None:
            return  # no block under way: the next one sets the timer again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._due)  # a later block's time
            return
        self._expired = True
        task.cancel()

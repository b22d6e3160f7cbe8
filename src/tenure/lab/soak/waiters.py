"""Callers waiting for results during the soak: some producers wait for the jobs they
enqueued with result_wanted, through faults, as an application would."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg

from tenure import Client, DatabaseUnavailable, JobFailed, ResultTimeout

#: Waiters at once; jobs enqueued while all are busy are not waited for (still checked stored).
MAX_WAITERS = 16


class ResultWaiters:
    def __init__(self, client: Client, *, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.received: dict[int, Any] = {}
        self.failed: dict[int, str] = {}
        self.retries = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def watch(self, job_id: int) -> None:
        """Waits for `job_id`'s result in the background, if a waiter is free."""
        if len(self._tasks) >= MAX_WAITERS:
            return
        task = asyncio.create_task(self._wait(job_id), name=f"soak-result-{job_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _wait(self, job_id: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            try:
                self.received[job_id] = await self.client.result(
                    job_id, timeout=max(0.0, deadline - loop.time()), poll=0.5
                )
                return
            except (DatabaseUnavailable, psycopg.Error, OSError):
                # The server restarted or the connection dropped: a real caller waits again.
                self.retries += 1
                await asyncio.sleep(0.5)
            except (JobFailed, ResultTimeout) as exc:
                self.failed[job_id] = str(exc)
                return

    async def finish(self, timeout: float) -> None:
        """Waits for every waiter (the queue has drained, so each should be done soon)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.failed[-1] = "a waiter was still waiting after the drain"

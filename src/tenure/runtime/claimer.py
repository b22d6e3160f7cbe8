"""The claim loop: free slots -> batch claim, woken by notifications or a poll interval (C3, N2)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from tenure.db.queries import TaskLeasePolicy
from tenure.runtime.executor import Executor
from tenure.runtime.services import WorkerServices

log = logging.getLogger("tenure.worker")


class Claimer:
    def __init__(self, services: WorkerServices, executor: Executor, queues: list[str]) -> None:
        self.services = services
        self.executor = executor
        self.queues = queues
        self._wake = asyncio.Event()
        self._next_queue = 0
        self.policies = [
            TaskLeasePolicy(
                t.name,
                t.policy.lease_seconds or services.options.lease_seconds,
                t.policy.max_runtime_seconds or services.options.max_runtime_seconds,
            )
            for t in executor.registry
        ]

    def wake(self) -> None:
        self._wake.set()

    def free_slots(self) -> int:
        return self.services.options.concurrency - len(self.executor.running)

    async def claim_once(self) -> int:
        """One pass over the queues, round robin, bounded by free slots. Returns jobs claimed."""
        services, options = self.services, self.services.options
        claimed = 0
        saturated_queue = False
        for _ in range(len(self.queues)):
            free = self.free_slots()
            if free <= 0:
                break
            queue = self.queues[self._next_queue % len(self.queues)]
            self._next_queue += 1
            want = min(free, options.claim_batch)
            async with services.pool.connection() as conn:
                jobs = await services.queries.job_claim(
                    conn,
                    queue=queue,
                    owner=services.owner,
                    limit=want,
                    default_lease_seconds=options.lease_seconds,
                    default_runtime_seconds=options.max_runtime_seconds,
                    policies=self.policies,
                )
            services.stats.claimed += len(jobs)
            claimed += len(jobs)
            saturated_queue = saturated_queue or len(jobs) == want
            for job in jobs:
                self.executor.start(job, self._slot_freed)
        if saturated_queue:
            self._wake.set()  # there is more where that came from
        return claimed

    def _slot_freed(self) -> None:
        self._wake.set()

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        while not stopping.is_set():
            self._wake.clear()
            if self.free_slots() > 0:
                try:
                    await self.claim_once()
                    failures = 0
                except psycopg.Error as exc:
                    failures += 1
                    self.services.stats.claim_errors += 1
                    log.warning("claim failed: %s", exc)
                    await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                    continue
            if self._wake.is_set() and self.free_slots() > 0:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.services.options.poll_interval)

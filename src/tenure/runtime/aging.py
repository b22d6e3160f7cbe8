"""Priority aging (O3): a periodic pass that lifts the priority of jobs that have waited."""

from __future__ import annotations

import logging

import psycopg

from tenure.db.fairness_queries import FairnessQueries
from tenure.runtime.services import WorkerServices
from tenure.runtime.supervisor import supervise

log = logging.getLogger("tenure.worker")


class PriorityAging:
    """Every worker runs it; passes from many workers at once are safe (SKIP LOCKED)."""

    def __init__(self, services: WorkerServices) -> None:
        self.services = services
        self.queries = FairnessQueries(services.queries.schema)

    async def run_once(self) -> int:
        options = self.services.options
        assert options.priority_aging_seconds is not None
        aged = 0
        while True:
            async with self.services.connection() as conn:
                rows = await self.queries.priority_age(
                    conn,
                    step_seconds=options.priority_aging_seconds,
                    max_boost=options.priority_aging_max,
                    limit=1000,
                )
            aged += len(rows)
            if len(rows) < 1000:
                return aged

    async def run(self) -> None:
        step = self.services.options.priority_aging_seconds
        if step is None:
            return
        health = self.services.health.service("priority aging", critical=False)

        async def run_once() -> None:
            try:
                await self.run_once()
            except psycopg.errors.InsufficientPrivilege:
                # A least-privilege worker role may not touch priorities; age from a role that may.
                log.warning(
                    "priority aging is off in this worker: its role may not UPDATE jobs.priority "
                    "and jobs.priority_boost (grant them, or run workers with aging elsewhere)"
                )
                raise _AgingOff() from None

        try:
            await supervise(health, run_once, lambda: max(0.05, min(30.0, step / 4)))
        except _AgingOff:
            return


class _AgingOff(BaseException):
    """Ends the aging service for good (its role may not do the work); not a failure."""

"""Expired-lease recovery, safe to run in every worker at once; and the signals a race left
undelivered (a send and a wait on one key, each committed without seeing the other), matched."""

from __future__ import annotations

import logging
from datetime import datetime

import psycopg

from tenure.db.queries import RecoveredLease, TaskBackoffPolicy
from tenure.db.wait_queries import WaitQueries
from tenure.model.jobs import JobState
from tenure.tasks import TaskRegistry
from tenure.worker.health import describe_error
from tenure.worker.service import Service
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")


class Recovery(Service):
    """Gives back the jobs of leases that expired (their workers died or stalled), each to run
    again after its backoff or dead when its attempts are spent."""

    name = "recovery"

    def __init__(self, services: WorkerServices, registry: TaskRegistry | None = None) -> None:
        self.services = services
        self.health = services.health.service(self.name)
        self.waits = WaitQueries(services.queries.schema)
        # Not critical, and apart from the recovery's own health: a sweep that keeps failing must
        # not stop the worker, nor count against the leases it recovers.
        self.sweep_health = services.health.service("signal sweep", critical=False)
        self.policies = [
            TaskBackoffPolicy(t.name, t.policy.backoff.base, t.policy.backoff.cap, t.policy.backoff.jitter)
            for t in (registry or [])
        ]

    async def run_once(self, *, now: datetime | None = None) -> list[RecoveredLease]:
        """Recovers every lease expired at `now` (database time by default), in batches."""
        services, options = self.services, self.services.options
        recovered: list[RecoveredLease] = []
        while True:
            async with services.connection() as conn:
                batch = await services.queries.lease_recover_expired(
                    conn,
                    limit=options.recovery_batch,
                    backoff_base=options.recovery_backoff.base,
                    backoff_cap=options.recovery_backoff.cap,
                    jitter=options.recovery_backoff.jitter,
                    policies=self.policies,
                    now=now,
                )
            recovered.extend(batch)
            services.events.leases_recovered(batch)
            for lease in batch:
                if lease.state is JobState.DEAD:
                    services.stats.recovered_dead += 1
                else:
                    services.stats.recovered_pending += 1
            scheduled = [lease.available_at for lease in batch if lease.state is JobState.SCHEDULED]
            if scheduled:
                services.scheduled(min(scheduled))
            if len(batch) < options.recovery_batch:
                break
        if recovered:
            log.info("recovered %s expired leases", len(recovered))
        await self.sweep_signals()
        return recovered

    async def sweep_signals(self) -> None:
        """Delivers what a send racing a wait left in the mailbox, and drops signals kept past
        their time (docs/waits.md)."""
        try:
            async with self.services.connection() as conn:
                swept = await self.waits.sweep(conn, batch=self.services.options.recovery_batch)
        except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable):
            return  # a schema before waits (a worker runs on older ones while `tenure migrate` runs)
        except Exception as exc:
            self.sweep_health.failed(exc)
            log.warning(
                "signal sweep failed (tried again at the next recovery pass): %s", describe_error(exc)
            )
            return
        self.sweep_health.succeeded()
        self.services.stats.signals_swept += swept.delivered
        if swept.delivered or swept.expired:
            log.info(
                "signals: %s delivered after a send raced a wait, %s dropped unread past their keeping time",
                swept.delivered,
                swept.expired,
            )

    def next_delay(self, result: list[RecoveredLease]) -> float:
        return self.services.options.recovery_every

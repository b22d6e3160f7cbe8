"""Lease renewal on progress, and the local watchdog that stops a job whose lease
has run out even when the database cannot be reached."""

from __future__ import annotations

import logging
import time

from tenure.db.queries import LeaseSeen
from tenure.worker.executor import Execution, Executor
from tenure.worker.revocation import RevocationCheck
from tenure.worker.service import Service
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")


class Heartbeat(Service):
    """Renews the leases of running jobs that made progress, and learns of revoked ones. It runs
    beside the watchdog, never in its way: a beat stuck on an unreachable database must not stop
    the watchdog from ending expired jobs."""

    name = "heartbeat"

    def __init__(
        self, services: WorkerServices, executor: Executor, revocations: RevocationCheck | None = None
    ) -> None:
        self.services = services
        self.executor = executor
        self.revocations = revocations
        self.health = services.health.service(self.name)

    async def run_once(self) -> None:
        """Renews the leases that are due, then checks for revocations."""
        await self.beat_once()
        if self.revocations is not None:
            await self.revocations.check()

    def next_delay(self, result: None) -> float:
        return self.services.options.heartbeat_every

    def failed(self, exc: BaseException) -> float:
        self.services.stats.heartbeat_failures += 1
        self.services.events.heartbeat_failed()
        # The next beat at its usual time, not later: a lease runs out while the backoff grows.
        return min(self.health.backoff(), self.services.options.heartbeat_every)

    async def beat_once(self) -> None:
        """Renews the leases of running jobs whose progress marker moved since the last beat."""
        services = self.services
        due: dict[tuple[int, int], tuple[Execution, int]] = {}
        renewals = []
        for execution in list(self.executor.running.values()):
            if execution.ctx.lease_lost:
                continue
            version, marker = execution.ctx.progress_snapshot()
            if version == execution.sent_progress_version:
                continue
            lease_seconds = self._lease_seconds(execution)
            due[(execution.job.id, execution.job.lease.token)] = (execution, version)
            renewals.append((execution.job.id, execution.job.lease.token, marker, lease_seconds))
        if not renewals:
            return
        sent_at = time.monotonic()
        async with services.connection() as conn:
            extended = await services.queries.lease_extend_many(conn, owner=services.owner, renewals=renewals)
            services.stats.heartbeats_sent += len(renewals)
            for ext in extended:
                execution, version = due.pop((ext.job_id, ext.token))
                execution.sent_progress_version = version
                execution.set_expiry(ext.expires_at, ext.db_now, sent_at)
            for (job_id, token), (execution, _) in due.items():
                seen = await services.queries.lease_get(conn, job_id)
                verdict = refused_renewal(seen, services.owner, token)
                if verdict == "deadline":
                    self.executor.deadline_reached(execution)
                elif verdict == "lost":
                    self.executor.lose(execution, "lease lost (heartbeat refused)", "HEARTBEAT_REFUSED")

    def _lease_seconds(self, execution: Execution) -> float:
        task = self.executor.registry.get(execution.job.task)
        if task is not None and task.policy.lease_seconds is not None:
            return task.policy.lease_seconds
        return self.services.options.lease_seconds


class Watchdog(Service):
    """Ends, by the local clock, jobs past their max runtime and jobs whose lease ran out, even
    when the database cannot be reached to say so."""

    name = "watchdog"

    def __init__(self, services: WorkerServices, executor: Executor) -> None:
        self.services = services
        self.executor = executor
        self.health = services.health.service(self.name)

    async def run_once(self) -> None:
        """Stops jobs past their max runtime, and jobs whose lease ran out by the local clock."""
        now = self.clock.monotonic()
        for execution in list(self.executor.running.values()):
            ctx = execution.ctx
            if ctx.lease_lost or ctx.completed or execution.handler_done:
                continue  # stopped already, or its outcome is being (or has been) written
            if now >= execution.local_deadline:
                self.executor.deadline_reached(execution)
            elif now >= execution.local_expiry:
                self.executor.lose(execution, "lease expired before it was renewed", "LEASE_EXPIRED")

    def next_delay(self, result: None) -> float:
        return self.services.options.watchdog_every


def refused_renewal(seen: LeaseSeen | None, owner: str, token: int) -> str | None:
    """Why the renewal of lease (`owner`, `token`) was refused, from the job's lease as the database
    sees it: "deadline" (still ours, but past its max runtime), "lost" (another's, finished, or
    run out), or None (still ours and live: the renewal was refused for nothing, try again)."""
    if (
        seen is None
        or seen.state != "running"
        or seen.lease_owner != owner
        or seen.lease_token != token
        or seen.lease_deadline is None
        or seen.lease_expires_at is None
    ):
        return "lost"
    if seen.lease_deadline <= seen.db_now:
        return "deadline"
    return "lost" if seen.lease_expires_at <= seen.db_now else None

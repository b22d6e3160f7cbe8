"""Lease renewal on progress, and the local watchdog that stops a job whose lease
has run out even when the database cannot be reached."""

from __future__ import annotations

import asyncio
import logging
import time

from tenure.runtime.executor import Execution, Executor
from tenure.runtime.revocation import RevocationCheck
from tenure.runtime.services import WorkerServices
from tenure.runtime.supervisor import describe_error

log = logging.getLogger("tenure.worker")


class Heartbeat:
    def __init__(
        self, services: WorkerServices, executor: Executor, revocations: RevocationCheck | None = None
    ) -> None:
        self.services = services
        self.executor = executor
        self.revocations = revocations
        self.health = services.health.service("heartbeat")
        self.watchdog_health = services.health.service("watchdog")

    async def run(self) -> None:
        last_beat = time.monotonic()
        beat: asyncio.Task[None] | None = None
        try:
            while True:
                await asyncio.sleep(self.services.options.watchdog_every)
                try:
                    self.watchdog()
                    self.watchdog_health.succeeded()
                except Exception as exc:  # never let one bad execution end the watchdog
                    self.watchdog_health.failed(exc)
                    log.exception("watchdog pass failed")
                # The beat runs beside the watchdog, never in its way: a beat stuck on an
                # unreachable database must not stop the watchdog from ending expired jobs.
                if (beat is None or beat.done()) and (
                    time.monotonic() - last_beat >= self.services.options.heartbeat_every
                ):
                    last_beat = time.monotonic()
                    beat = asyncio.create_task(self._beat(), name="tenure-heartbeat-beat")
        finally:
            if beat is not None and not beat.done():
                beat.cancel()
                await asyncio.wait([beat], timeout=1.0)

    async def _beat(self) -> None:
        try:
            await self.beat_once()
            if self.revocations is not None:
                await self.revocations.check()
        except Exception as exc:
            self.health.failed(exc)
            self.services.stats.heartbeat_failures += 1
            self.services.events.heartbeat_failed()
            log.warning("heartbeat failed: %s", describe_error(exc))
        else:
            self.health.succeeded()

    def watchdog(self) -> None:
        """Stops jobs past their max runtime, and jobs whose lease ran out by the local clock."""
        now = time.monotonic()
        for execution in list(self.executor.running.values()):
            ctx = execution.ctx
            if ctx.lease_lost or ctx.completed or execution.handler_done:
                continue  # stopped already, or its outcome is being (or has been) written
            if now >= execution.local_deadline:
                self.executor.deadline_reached(execution)
            elif now >= execution.local_expiry:
                self.executor.lose(execution, "lease expired before it was renewed", "LEASE_EXPIRED")

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
                lease = await services.queries.lease_get(conn, job_id)
                ours = (
                    lease is not None
                    and lease["state"] == "running"
                    and lease["lease_owner"] == services.owner
                    and lease["lease_token"] == token
                )
                if ours and lease is not None and lease["lease_deadline"] <= lease["db_now"]:
                    self.executor.deadline_reached(execution)
                elif not ours or lease is None or lease["lease_expires_at"] <= lease["db_now"]:
                    self.executor.lose(execution, "lease lost (heartbeat refused)", "HEARTBEAT_REFUSED")

    def _lease_seconds(self, execution: Execution) -> float:
        task = self.executor.registry.get(execution.job.task)
        if task is not None and task.policy.lease_seconds is not None:
            return task.policy.lease_seconds
        return self.services.options.lease_seconds

"""Typed access to the operations queries: gauges (metrics.sql), the dead-job workflow (dead.sql)
and retention with the worker registry (maintenance.sql).

Every function takes `now`: None is the database clock; tests pass a time to age jobs without
sleeping. Sync variants exist where a caller runs outside an event loop (the metrics exporter's
HTTP thread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, Connection
from psycopg.types.json import Jsonb

from tenure.db._sqlfiles import named_queries
from tenure.db._sync.fetch import fetch as fetch_sync
from tenure.db.channels import notify_channel
from tenure.db.fetch import Row, fetch

#: The window of the control-act gauge (tenure_control_acts_recent).
CONTROL_WINDOW_SECONDS = 900.0


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """One queue's state at one instant (database time)."""

    queue: str
    scheduled: int
    pending: int
    oldest_claimable_at: datetime | None
    running: int
    leases_near_expiry: int
    dead: int
    oldest_dead_at: datetime | None
    db_now: datetime

    @property
    def oldest_claimable_age(self) -> float:
        """Seconds the oldest claimable job has waited; 0 when nothing is claimable."""
        return (self.db_now - self.oldest_claimable_at).total_seconds() if self.oldest_claimable_at else 0.0

    @property
    def oldest_dead_age(self) -> float:
        """Seconds since the oldest unresolved dead job died; 0 when there is none."""
        return (self.db_now - self.oldest_dead_at).total_seconds() if self.oldest_dead_at else 0.0


@dataclass(frozen=True, slots=True)
class WorkerGauges:
    registered: int
    stale: int
    busy: int
    capacity: int
    lease_owners: int
    failing: int
    db_now: datetime


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a scrape, `tenure status` or `tenure check` reads, from one snapshot."""

    queues: list[QueueGauges]
    workers: WorkerGauges
    connections: list[Row]
    lock_waits: int
    longest_lock_wait: float
    paused: list[Row] = field(default_factory=list)
    """Queues paused now: queue, paused_seconds, until."""
    control_recent: list[Row] = field(default_factory=list)
    """Control acts (cancel, revoke, snooze, retry_now) of the last CONTROL_WINDOW_SECONDS."""
    limits: list[Row] = field(default_factory=list)
    """Limited queues: their limits and live leases now."""
    schedules: list[Row] = field(default_factory=list)
    """Schedules: name, paused, declared (by a live worker), since_last_fire_seconds."""


class OpsQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.channel = notify_channel(schema)
        self._sql = named_queries(schema)

    # -- gauges ---------------------------------------------------------------------------------

    def _snapshot_params(self, near_expiry: float, stale: float, now: datetime | None) -> dict[str, Any]:
        return {
            "near_expiry_seconds": near_expiry,
            "stale_seconds": stale,
            "control_window_seconds": CONTROL_WINDOW_SECONDS,
            "now": now,
        }

    @staticmethod
    def _snapshot(results: list[list[Row]]) -> Snapshot:
        queues, workers, connections, locks, paused, control, schedules, limits = results
        return Snapshot(
            queues=[QueueGauges(**r) for r in queues],
            workers=WorkerGauges(**workers[0]),
            connections=connections,
            lock_waits=int(locks[0]["waiting"]),
            longest_lock_wait=float(locks[0]["longest_seconds"]),
            paused=paused,
            control_recent=control,
            schedules=schedules,
            limits=limits,
        )

    def _snapshot_queries(self) -> list[str]:
        return [
            self._sql[n]
            for n in (
                "gauge_queues",
                "gauge_workers",
                "gauge_connections",
                "gauge_lock_waits",
                "gauge_paused",
                "gauge_control_recent",
                "gauge_schedules",
                "queue_limits_list",
            )
        ]

    async def snapshot(
        self,
        conn: AsyncConnection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        """All gauges in one REPEATABLE READ, READ ONLY transaction (conn must be autocommit)."""
        async with conn.transaction():
            await self.begin_snapshot(conn)
            return await self.read_gauges(
                conn, near_expiry_seconds=near_expiry_seconds, stale_seconds=stale_seconds, now=now
            )

    async def begin_snapshot(self, conn: AsyncConnection[Any]) -> None:
        """Makes the transaction just opened on `conn` one read-only snapshot (first statement)."""
        await conn.execute(self._sql["snapshot_begin"])

    async def read_gauges(
        self,
        conn: AsyncConnection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        """The gauges, inside the caller's snapshot transaction."""
        params = self._snapshot_params(near_expiry_seconds, stale_seconds, now)
        return self._snapshot([await fetch(conn, q, params) for q in self._snapshot_queries()])

    def snapshot_sync(
        self,
        conn: Connection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        params = self._snapshot_params(near_expiry_seconds, stale_seconds, now)
        with conn.transaction():
            conn.execute(self._sql["snapshot_begin"])
            results = [fetch_sync(conn, q, params) for q in self._snapshot_queries()]
        return self._snapshot(results)

    async def finished_recent(
        self, conn: AsyncConnection[Any], *, minutes: int, now: datetime | None = None
    ) -> list[Row]:
        return await fetch(conn, self._sql["gauge_finished_recent"], {"minutes": minutes, "now": now})

    async def worker_list(self, conn: AsyncConnection[Any], *, now: datetime | None = None) -> list[Row]:
        return await fetch(conn, self._sql["worker_list"], {"now": now})

    # -- dead jobs ------------------------------------------------------------------------------

    async def dead_search(
        self,
        conn: AsyncConnection[Any],
        *,
        queue: str | None = None,
        task: str | None = None,
        error_code: str | None = None,
        older_than: float | None = None,
        limit: int = 100,
        now: datetime | None = None,
    ) -> list[Row]:
        params = {
            "queue": queue,
            "task": task,
            "error_code": error_code,
            "older_than": older_than,
            "limit": limit,
            "now": now,
        }
        return await fetch(conn, self._sql["dead_search"], params)

    async def dead_reprocess_many(
        self,
        conn: AsyncConnection[Any],
        *,
        actor: str,
        reason: str,
        attempts: int,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        task: str | None = None,
        error_code: str | None = None,
        older_than: float | None = None,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> list[int]:
        """Dead jobs (by ids and/or filter) back to pending; returns the ids moved."""
        params = {
            "ids": list(ids) if ids is not None else None,
            "queue": queue,
            "task": task,
            "error_code": error_code,
            "older_than": older_than,
            "limit": limit,
            "attempts": attempts,
            "actor": actor,
            "reason": reason,
            "channel": self.channel,
            "now": now,
        }
        return [r["id"] for r in await fetch(conn, self._sql["dead_reprocess_many"], params)]

    async def dead_purge(
        self,
        conn: AsyncConnection[Any],
        *,
        older_than: float,
        queue: str | None = None,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> list[int]:
        params = {"older_than": older_than, "queue": queue, "limit": limit, "now": now}
        return [r["id"] for r in await fetch(conn, self._sql["dead_purge"], params)]

    # -- retention and the worker registry ------------------------------------------------------

    async def jobs_prune_finished(
        self,
        conn: AsyncConnection[Any],
        *,
        default_seconds: float,
        per_queue: Mapping[str, float],
        limit: int,
        now: datetime | None = None,
    ) -> list[int]:
        params = {
            "default_seconds": default_seconds,
            "policy_queues": list(per_queue),
            "policy_seconds": list(per_queue.values()),
            "shortest_seconds": min([default_seconds, *per_queue.values()]),
            "limit": limit,
            "now": now,
        }
        return [r["id"] for r in await fetch(conn, self._sql["jobs_prune_finished"], params)]

    async def job_events_prune(
        self, conn: AsyncConnection[Any], *, seconds: float, limit: int, now: datetime | None = None
    ) -> int:
        rows = await fetch(
            conn, self._sql["job_events_prune"], {"seconds": seconds, "limit": limit, "now": now}
        )
        return len(rows)

    async def worker_seen(
        self,
        conn: AsyncConnection[Any],
        *,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        busy: int,
        failing: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> None:
        params = {
            "id": worker_id[:200],
            "queues": list(queues),
            "concurrency": concurrency,
            "busy": max(0, min(busy, concurrency)),
            "failing": Jsonb(failing) if failing else None,
            "now": now,
        }
        await fetch(conn, self._sql["worker_seen"], params)

    async def worker_forget(self, conn: AsyncConnection[Any], worker_id: str) -> None:
        await fetch(conn, self._sql["worker_forget"], {"id": worker_id[:200]})

    async def workers_prune_silent(
        self, conn: AsyncConnection[Any], *, seconds: float, now: datetime | None = None
    ) -> int:
        return len(await fetch(conn, self._sql["workers_prune_silent"], {"seconds": seconds, "now": now}))

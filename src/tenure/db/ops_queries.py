"""Typed access to the operations queries: gauges (metrics.sql), the dead-job workflow (dead.sql)
and retention with the worker registry (maintenance.sql).

Every function takes `now`: None is the database clock; tests pass a time to age jobs without
sleeping. The gauges are GaugeQueries', whose blocking twin the metrics exporter's HTTP thread runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.channels import notify_channel
from tenure.db.control_queries import ControlQueries
from tenure.db.fetch import fetch, fetch_as
from tenure.db.gauge_queries import GaugeQueries
from tenure.db.ops_rows import (
    EVERY_DEAD_JOB,
    DeadFilter,
    DeadJob,
    FinishedCount,
    RegisteredWorker,
    VacuumCheck,
)


class OpsQueries(GaugeQueries):
    """The gauges (GaugeQueries), the dead-job workflow, retention and the worker registry."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.channel = notify_channel(schema)

    async def finished_recent(
        self, conn: AsyncConnection[Any], *, minutes: int, now: datetime | None = None
    ) -> list[FinishedCount]:
        params = {"minutes": minutes, "now": now}
        return await fetch_as(conn, FinishedCount, self._sql["gauge_finished_recent"], params)

    async def worker_list(
        self, conn: AsyncConnection[Any], *, now: datetime | None = None
    ) -> list[RegisteredWorker]:
        return await fetch_as(conn, RegisteredWorker, self._sql["worker_list"], {"now": now})

    # -- dead jobs ------------------------------------------------------------------------------

    async def dead_search(
        self,
        conn: AsyncConnection[Any],
        where: DeadFilter = EVERY_DEAD_JOB,
        *,
        limit: int = 100,
        now: datetime | None = None,
    ) -> list[DeadJob]:
        """The dead jobs `where` matches, the last to die first."""
        params = {**where.params(), "limit": limit, "now": now}
        return await fetch_as(conn, DeadJob, self._sql["dead_search"], params)

    async def dead_reprocess_many(
        self,
        conn: AsyncConnection[Any],
        where: DeadFilter = EVERY_DEAD_JOB,
        *,
        actor: str,
        reason: str,
        attempts: int,
        ids: Sequence[int] | None = None,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> list[int]:
        """Dead jobs (by ids and/or filter) back to pending; returns the ids moved. The move is
        job_retry_many's, the one statement for it, on the jobs the filter locks first."""
        params = {**where.params(), "ids": None if ids is None else list(ids), "limit": limit, "now": now}
        async with conn.transaction():
            matching = [r["id"] for r in await fetch(conn, self._sql["dead_matching"], params)]
            if not matching:
                return []
            rows = await ControlQueries(self.schema).retry_many(
                conn, matching, attempts=attempts, actor=actor, reason=reason, now=now
            )
        return [r.id for r in rows.moved]

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

    async def workflows_prune_finished(
        self, conn: AsyncConnection[Any], *, seconds: float, limit: int, now: datetime | None = None
    ) -> int:
        """Deletes finished workflows (every step succeeded or cancelled) older than `seconds`."""
        params = {"seconds": seconds, "limit": limit, "now": now}
        return len(await fetch(conn, self._sql["workflows_prune_finished"], params))

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
    ) -> bool:
        """Writes the worker's row; True when this created it (its first refresh, or its first
        after the row was deleted as silent), when the tasks are to be recorded again."""
        params = {
            "id": worker_id[:200],
            "queues": list(queues),
            "concurrency": concurrency,
            "busy": max(0, min(busy, concurrency)),
            "failing": Jsonb(failing) if failing else None,
            "now": now,
        }
        rows = await fetch(conn, self._sql["worker_seen"], params)
        return bool(rows and rows[0]["inserted"])

    async def worker_tasks_record(
        self, conn: AsyncConnection[Any], worker_id: str, tasks: Sequence[str]
    ) -> None:
        await fetch(conn, self._sql["worker_tasks_record"], {"id": worker_id[:200], "tasks": list(tasks)})

    async def worker_forget(self, conn: AsyncConnection[Any], worker_id: str) -> None:
        await fetch(conn, self._sql["worker_forget"], {"id": worker_id[:200]})

    async def jobs_vacuum_due(self, conn: AsyncConnection[Any]) -> VacuumCheck:
        return (await fetch_as(conn, VacuumCheck, self._sql["jobs_vacuum_due"], {}))[0]

    async def jobs_vacuum(self, conn: AsyncConnection[Any]) -> None:
        """VACUUM `jobs`; `conn` must be in autocommit (a vacuum runs outside any transaction)."""
        await conn.execute(self._sql["jobs_vacuum"].encode())

    async def workers_prune_silent(
        self, conn: AsyncConnection[Any], *, seconds: float, now: datetime | None = None
    ) -> int:
        return len(await fetch(conn, self._sql["workers_prune_silent"], {"seconds": seconds, "now": now}))

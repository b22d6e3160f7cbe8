"""Typed access to the dashboard's own named queries (sql/dashboard.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.fetch import fetch
from tenure.db.sqlfiles import package_queries

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The jobs list's filters; None matches every job."""

    queue: str | None = None
    task: str | None = None
    state: str | None = None
    error_code: str | None = None
    ordering_key: str | None = None
    older_than: float | None = None
    newer_than: float | None = None
    contains: dict[str, Any] | None = None
    before: int | None = None


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead jobs a bulk reprocess takes; the same filters as `tenure dead reprocess`."""

    queue: str | None = None
    task: str | None = None
    error_code: str | None = None
    older_than: float | None = None

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "task": self.task,
            "error_code": self.error_code,
            "older_than": self.older_than,
        }

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.params().values())


class DashboardQueries:
    def __init__(self, schema: str) -> None:
        self._sql = package_queries("tenure.ops.dashboard", schema)

    async def _rows(self, conn: AsyncConnection[Any], name: str, params: Row | None = None) -> list[Row]:
        return await fetch(conn, self._sql[name], params or {})

    async def jobs_list(self, conn: AsyncConnection[Any], where: JobFilter, limit: int) -> list[Row]:
        params = {
            "queue": where.queue,
            "task": where.task,
            "state": where.state,
            "error_code": where.error_code,
            "ordering_key": where.ordering_key,
            "older_than": where.older_than,
            "newer_than": where.newer_than,
            "contains": None if where.contains is None else Jsonb(where.contains),
            "before": where.before,
            "limit": limit,
        }
        return await self._rows(conn, "dashboard_jobs_list", params)

    async def trouble_recent(self, conn: AsyncConnection[Any], minutes: int) -> list[Row]:
        return await self._rows(conn, "dashboard_trouble_recent", {"minutes": minutes})

    async def dead_count(self, conn: AsyncConnection[Any], where: DeadFilter) -> int:
        [row] = await self._rows(conn, "dashboard_dead_count", where.params())
        return int(row["jobs"])

    async def dead_count_upto(self, conn: AsyncConnection[Any], where: DeadFilter, cap: int) -> int:
        """How many dead jobs `where` matches, counting no further than `cap`."""
        [row] = await self._rows(conn, "dashboard_dead_count_upto", {**where.params(), "cap": cap})
        return int(row["jobs"])

    async def dead_by_error(self, conn: AsyncConnection[Any], limit: int = 20) -> list[Row]:
        return await self._rows(conn, "dashboard_dead_by_error", {"limit": limit})

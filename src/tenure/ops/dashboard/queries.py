"""Typed access to the dashboard's own named queries (sql/dashboard.sql)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.fetch import fetch_as
from tenure.db.ops_rows import DeadFilter
from tenure.db.sqlfiles import package_queries


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
class ListedJob:
    """A job as the jobs list shows it, with its age in seconds since enqueue."""

    id: int
    queue: str
    task: str
    state: str
    attempt_count: int
    max_attempts: int
    last_error_code: str | None
    ordering_key: str | None
    created_at: datetime
    finished_at: datetime | None
    lease_owner: str | None
    lease_token: int
    age_seconds: float


@dataclass(frozen=True, slots=True)
class TroubleCount:
    """How many audit events of one kind (retry, lease_expired, fencing_lost) one minute saw;
    minute 0 is the current one."""

    event: str
    minutes_ago: int
    events: int


@dataclass(frozen=True, slots=True)
class DeadGroup:
    """The dead jobs of one queue, task and error code: how many, and when the first and the
    last of them died."""

    queue: str
    task: str
    last_error_code: str | None
    jobs: int
    first_dead: datetime
    last_dead: datetime


@dataclass(frozen=True, slots=True)
class JobCount:
    """How many jobs a count matched."""

    jobs: int


class DashboardQueries:
    def __init__(self, schema: str) -> None:
        self._sql = package_queries("tenure.ops.dashboard", schema)

    async def jobs_list(self, conn: AsyncConnection[Any], where: JobFilter, limit: int) -> list[ListedJob]:
        contains = None if where.contains is None else Jsonb(where.contains)
        params = {**asdict(where), "contains": contains, "limit": limit}
        return await fetch_as(conn, ListedJob, self._sql["dashboard_jobs_list"], params)

    async def trouble_recent(self, conn: AsyncConnection[Any], minutes: int) -> list[TroubleCount]:
        params = {"minutes": minutes}
        return await fetch_as(conn, TroubleCount, self._sql["dashboard_trouble_recent"], params)

    async def dead_count(self, conn: AsyncConnection[Any], where: DeadFilter, cap: int | None = None) -> int:
        """How many dead jobs `where` matches, counting no further than `cap` (None: all of them)."""
        params = {**where.params(), "cap": cap}
        [count] = await fetch_as(conn, JobCount, self._sql["dashboard_dead_count"], params)
        return count.jobs

    async def dead_by_error(self, conn: AsyncConnection[Any], limit: int = 20) -> list[DeadGroup]:
        return await fetch_as(conn, DeadGroup, self._sql["dashboard_dead_by_error"], {"limit": limit})

"""Reading every gauge from one snapshot. Written once, async; tools/async_to_sync.py writes its
blocking twin (tenure.db.sync.gauge_queries), which the metrics exporter's HTTP thread runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tenure.db.fetch import Row, fetch
from tenure.db.gauges import NEWER_THAN_WORKER_FLOOR, SNAPSHOT_QUERIES, Snapshot, snapshot_of, snapshot_params
from tenure.db.sqlfiles import named_queries

ASYNC = True


class GaugeQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)

    @asynccontextmanager
    async def snapshot(self, conn: AsyncConnection[Any]) -> AsyncIterator[None]:
        """One REPEATABLE READ, READ ONLY transaction on `conn` (which must be autocommit): the
        gauges and whatever else is read inside it describe the same instant."""
        async with conn.transaction():
            await conn.execute(self._sql["snapshot_begin"])
            yield

    async def read_gauges(
        self,
        conn: AsyncConnection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        """The gauges, inside the caller's `snapshot`."""
        params = snapshot_params(near_expiry_seconds, stale_seconds, now)
        return snapshot_of([await self._read(conn, name, params) for name in SNAPSHOT_QUERIES])

    async def _read(self, conn: AsyncConnection[Any], name: str, params: dict[str, Any]) -> list[Row]:
        if name not in NEWER_THAN_WORKER_FLOOR:
            return await fetch(conn, self._sql[name], params)
        try:
            async with conn.transaction():  # a savepoint: the snapshot goes on after a failure
                return await fetch(conn, self._sql[name], params)
        except (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable):
            return []  # a schema before the migration this gauge reads

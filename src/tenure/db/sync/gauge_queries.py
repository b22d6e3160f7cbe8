# Generated from src/tenure/db/gauge_queries.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Reading every gauge from one snapshot. Written once, async; tools/async_to_sync.py writes its
blocking twin (tenure.db.sync.gauge_queries), which the metrics exporter's HTTP thread runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import Connection

from tenure.db.gauges import NEWER_THAN_WORKER_FLOOR, SNAPSHOT_QUERIES, Snapshot, snapshot_of, snapshot_params
from tenure.db.sqlfiles import named_queries
from tenure.db.sync.fetch import Row, fetch


class GaugeQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)

    @contextmanager
    def snapshot(self, conn: Connection[Any]) -> Iterator[None]:
        """One REPEATABLE READ, READ ONLY transaction on `conn` (which must be autocommit): the
        gauges and whatever else is read inside it describe the same instant."""
        with conn.transaction():
            conn.execute(self._sql["snapshot_begin"])
            yield

    def read_gauges(
        self,
        conn: Connection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        """The gauges, inside the caller's `snapshot`."""
        params = snapshot_params(near_expiry_seconds, stale_seconds, now)
        return snapshot_of([self._read(conn, name, params) for name in SNAPSHOT_QUERIES])

    def _read(self, conn: Connection[Any], name: str, params: dict[str, Any]) -> list[Row]:
        if name not in NEWER_THAN_WORKER_FLOOR:
            return fetch(conn, self._sql[name], params)
        try:
            with conn.transaction():  # a savepoint: the snapshot goes on after a failure
                return fetch(conn, self._sql[name], params)
        except (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable):
            return []  # a schema before the migration this gauge reads

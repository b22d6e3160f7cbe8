# Generated from src/tenure/db/gauge_queries.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Reading every gauge from one snapshot. Written once, async; tools/async_to_sync.py writes its
blocking twin (tenure.db.sync.gauge_queries), which the metrics exporter's HTTP thread runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import Connection

from tenure.db.gauges import SNAPSHOT_QUERIES, Snapshot, snapshot_of, snapshot_params
from tenure.db.sqlfiles import named_queries
from tenure.db.sync.fetch import fetch


class GaugeQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)

    def snapshot(
        self,
        conn: Connection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        """All gauges in one REPEATABLE READ, READ ONLY transaction (conn must be autocommit)."""
        with conn.transaction():
            self.begin_snapshot(conn)
            return self.read_gauges(
                conn, near_expiry_seconds=near_expiry_seconds, stale_seconds=stale_seconds, now=now
            )

    def begin_snapshot(self, conn: Connection[Any]) -> None:
        """Makes the transaction just opened on `conn` one read-only snapshot (first statement)."""
        conn.execute(self._sql["snapshot_begin"])

    def read_gauges(
        self,
        conn: Connection[Any],
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        now: datetime | None = None,
    ) -> Snapshot:
        """The gauges, inside the caller's snapshot transaction."""
        params = snapshot_params(near_expiry_seconds, stale_seconds, now)
        return snapshot_of([fetch(conn, self._sql[name], params) for name in SNAPSHOT_QUERIES])

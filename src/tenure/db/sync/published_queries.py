# Generated from src/tenure/db/published_queries.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Typed access to the named queries of published values (published.sql): a job's fenced publish,
and the reads of its caller. Written once, async; tools/async_to_sync.py writes its blocking twin
(tenure.db.sync.published_queries), which the blocking client runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import Connection

from tenure.db.channels import results_channel
from tenure.db.sqlfiles import named_queries
from tenure.db.sync.fetch import fetch
from tenure.model.waits import Published


class PublishedQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.results_channel = results_channel(schema)
        self._sql = named_queries(schema)

    def publish(
        self,
        conn: Connection[Any],
        *,
        job_id: int,
        owner: str,
        token: int,
        key: str,
        value_json: str,
        now: datetime | None = None,
    ) -> str:
        """The lease holder publishes `value_json` under `key`: 'published', or 'lost'."""
        params = {
            "id": job_id,
            "owner": owner,
            "token": token,
            "key": key,
            "value": value_json,
            "results_channel": self.results_channel,
            "now": now,
        }
        [row] = fetch(conn, self._sql["job_publish"], params)
        return str(row["outcome"])

    def get(
        self, conn: Connection[Any], *, key: str, workflow_id: int | None, job_id: int | None
    ) -> Published | None:
        rows = fetch(
            conn, self._sql["published_get"], {"key": key, "workflow_id": workflow_id, "job_id": job_id}
        )
        return Published(**rows[0]) if rows else None

    def of_workflow(self, conn: Connection[Any], workflow_id: int) -> list[Published]:
        rows = fetch(conn, self._sql["published_of_workflow"], {"id": workflow_id})
        return [Published(**r) for r in rows]

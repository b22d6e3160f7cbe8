"""Typed access to the per-key ordering queries (ordering.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db.channels import notify_channel
from tenure.db.control_queries import ControlQueries
from tenure.db.fetch import Row, fetch
from tenure.db.sqlfiles import named_queries


class OrderingQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)
        self.channel = notify_channel(schema)

    async def blocked(
        self, conn: AsyncConnection[Any], *, ordering_key: str | None = None, limit: int = 100
    ) -> list[Row]:
        """Dead keyed jobs and how many jobs of their key wait behind each."""
        params = {"ordering_key": ordering_key, "limit": limit}
        return await fetch(conn, self._sql["ordering_blocked"], params)

    async def skip(
        self,
        conn: AsyncConnection[Any],
        job_id: int,
        *,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> Row | None:
        """Cancels a dead, pending or scheduled keyed job so its key moves on; None if it is none
        of those (ControlQueries.skip_ordering_head, the cancel's own statement)."""
        row = await ControlQueries(self.schema).skip_ordering_head(
            conn, job_id, actor=actor, reason=reason, now=now
        )
        return None if row is None else {"id": row["id"], "ordering_key": row["ordering_key"]}

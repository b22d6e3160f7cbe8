"""Typed access to the per-key ordering queries (ordering.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db._sqlfiles import named_queries
from tenure.db.channels import notify_channel
from tenure.db.fetch import Row, fetch


class OrderingQueries:
    def __init__(self, schema: str) -> None:
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
        """Cancels a dead or pending keyed job so its key moves on; None if it is neither."""
        params = {"id": job_id, "actor": actor, "reason": reason, "channel": self.channel, "now": now}
        rows = await fetch(conn, self._sql["ordering_skip"], params)
        return rows[0] if rows else None

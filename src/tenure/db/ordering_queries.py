"""Typed access to the per-key ordering queries (ordering.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db.channels import notify_channel
from tenure.db.control_queries import ControlQueries
from tenure.db.control_rows import SkippedJob
from tenure.db.fetch import fetch_as
from tenure.db.sqlfiles import named_queries


@dataclass(frozen=True, slots=True)
class BlockedKey:
    """A dead keyed job, the head its ordering key waits on, and how many jobs of the key wait
    behind it."""

    id: int
    ordering_key: str
    queue: str
    task: str
    last_error_code: str | None
    finished_at: datetime
    waiting: int


class OrderingQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)
        self.channel = notify_channel(schema)

    async def blocked(
        self, conn: AsyncConnection[Any], *, ordering_key: str | None = None, limit: int = 100
    ) -> list[BlockedKey]:
        """Dead keyed jobs and how many jobs of their key wait behind each."""
        params = {"ordering_key": ordering_key, "limit": limit}
        return await fetch_as(conn, BlockedKey, self._sql["ordering_blocked"], params)

    async def skip(
        self,
        conn: AsyncConnection[Any],
        job_id: int,
        *,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> SkippedJob | None:
        """Cancels a dead, pending or scheduled keyed job so its key moves on; None if it is none
        of those (ControlQueries.skip_ordering_head, the cancel's own statement)."""
        return await ControlQueries(self.schema).skip_ordering_head(
            conn, job_id, actor=actor, reason=reason, now=now
        )

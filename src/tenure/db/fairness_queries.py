"""Typed access to the fairness queries (fairness.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db._sqlfiles import named_queries
from tenure.db.queries import Row, _fetch


class FairnessQueries:
    def __init__(self, schema: str) -> None:
        self._sql = named_queries(schema)
        self._lock_space = f"tenure.aging:{schema}"

    async def priority_age(
        self,
        conn: AsyncConnection[Any],
        *,
        step_seconds: float,
        max_boost: int,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> list[Row]:
        """Ages up to `limit` pending jobs; returns (id, queue, priority, priority_boost) of each."""
        params = {
            "step_seconds": step_seconds,
            "max_boost": max_boost,
            "limit": limit,
            "lock_space": self._lock_space,
            "now": now,
        }
        return await _fetch(conn, self._sql["priority_age"], params)

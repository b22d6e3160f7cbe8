"""Running one statement and reading its rows as dicts: how every query class reads. Written once,
async; tools/async_to_sync.py writes its blocking twin (tenure.db.sync.fetch)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

ASYNC = True

Row = dict[str, Any]


async def fetch(conn: AsyncConnection[Any], query: str, params: dict[str, Any]) -> list[Row]:
    """The rows `query` gives for `params`; none for a statement that returns nothing."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []

"""The benchmark's named queries (bench/sql/bench.sql), with the schema name substituted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tenure.db.sqlfiles import package_queries


def bench_queries(schema: str) -> dict[str, str]:
    return package_queries("tenure.lab.bench", schema)


async def fetch(conn: AsyncConnection[Any], schema: str, name: str, **params: Any) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(bench_queries(schema)[name].encode(), params)
        return await cur.fetchall() if cur.description else []


async def execute(conn: AsyncConnection[Any], schema: str, name: str, **params: Any) -> int:
    async with conn.cursor() as cur:
        await cur.execute(bench_queries(schema)[name].encode(), params)
        return cur.rowcount


async def clock(conn: AsyncConnection[Any], schema: str) -> datetime:
    """The server's time now."""
    now: datetime = (await fetch(conn, schema, "bench_clock"))[0]["now"]
    return now

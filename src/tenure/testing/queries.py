"""Typed access to tenure.testing's named queries (sql/testing.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tenure.db.sqlfiles import package_queries


class TestingQueries:
    """The statements of one schema's tests: the due queues a drain goes through, and emptying
    and dropping the test schema (blocking: the pytest fixtures run them outside any loop)."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    def __init__(self, schema: str) -> None:
        self._sql = package_queries("tenure.testing", schema)

    async def due_queues(
        self, conn: AsyncConnection[Any], *, tasks: Sequence[str], queue: str | None
    ) -> list[str]:
        cur = await conn.execute(self._sql["testing_due_queues"], {"tasks": list(tasks), "queue": queue})
        return [row[0] for row in await cur.fetchall()]

    def empty_schema(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(self._sql["testing_schema_empty"].encode())

    def drop_schema(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(self._sql["testing_schema_drop"].encode())

"""Typed access to the soak's named queries (sql/soak.sql)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tenure.db._sqlfiles import SCHEMA_PLACEHOLDER, quote_schema, read_sections
from tenure.txn import SyncTransaction

Row = dict[str, Any]


@functools.cache
def _sections() -> dict[str, str]:
    return read_sections("tenure.soak", "sql")


class SoakQueries:
    def __init__(self, schema: str) -> None:
        quoted = quote_schema(schema)
        self._sql = {name: body.replace(SCHEMA_PLACEHOLDER, quoted) for name, body in _sections().items()}

    async def _rows(self, conn: AsyncConnection[Any], name: str, params: Row | None = None) -> list[Row]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self._sql[name], params or {})
            return await cur.fetchall() if cur.description else []

    async def terminate_worker(self, conn: AsyncConnection[Any], owner: str) -> int:
        return int((await self._rows(conn, "soak_terminate_worker", {"owner": owner}))[0]["terminated"])

    async def snapshot_open(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_snapshot_open"))[0]

    async def progress(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_progress"))[0]

    async def leases_outstanding(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_leases_outstanding"))[0]

    async def outcomes(self, conn: AsyncConnection[Any]) -> list[Row]:
        return await self._rows(conn, "soak_outcomes")

    async def missing(self, conn: AsyncConnection[Any], ids: Sequence[int]) -> int:
        return int((await self._rows(conn, "soak_missing", {"ids": list(ids)}))[0]["missing"])

    async def events(self, conn: AsyncConnection[Any]) -> list[Row]:
        return await self._rows(conn, "soak_events")

    async def error_codes(self, conn: AsyncConnection[Any]) -> dict[str, int]:
        return {r["code"]: int(r["n"]) for r in await self._rows(conn, "soak_error_codes")}

    async def lock_running_jobs(self, conn: AsyncConnection[Any], limit: int) -> list[int]:
        return [r["id"] for r in await self._rows(conn, "soak_lock_running_jobs", {"limit": limit})]

    async def terminate_workers(self, conn: AsyncConnection[Any], prefix: str) -> int:
        rows = await self._rows(conn, "soak_terminate_workers", {"prefix": prefix + "%"})
        return int(rows[0]["terminated"])

    async def running_sample(self, conn: AsyncConnection[Any], limit: int) -> list[Row]:
        return await self._rows(conn, "soak_running_sample", {"limit": limit})

    async def claims_since(self, conn: AsyncConnection[Any], queue: str, since: Any) -> int:
        return int(
            (await self._rows(conn, "soak_claims_since", {"queue": queue, "since": since}))[0]["claims"]
        )

    async def snooze_results(self, conn: AsyncConnection[Any], tasks: Sequence[str]) -> list[Row]:
        return await self._rows(conn, "soak_snooze_results", {"tasks": list(tasks)})

    async def limited_live(self, conn: AsyncConnection[Any], queue: str) -> int:
        return int((await self._rows(conn, "soak_limited_live", {"queue": queue}))[0]["live"])

    async def schedule_fires(self, conn: AsyncConnection[Any], schedule: str) -> Row:
        return (await self._rows(conn, "soak_schedule_fires", {"schedule": schedule}))[0]

    async def completions_between(
        self, conn: AsyncConnection[Any], since: datetime, until: datetime
    ) -> list[datetime]:
        rows = await self._rows(conn, "soak_completions_between", {"since": since, "until": until})
        return [r["finished_at"] for r in rows]

    def account_reopen(self, tx: SyncTransaction, account: int) -> None:
        tx.execute(self._sql["soak_account_reopen"], {"id": account})

"""Typed access to the demo bank's named queries (sql/bank.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row

from tenure import JobContext, SyncTransaction
from tenure.db.sqlfiles import package_queries

Row = dict[str, Any]


def database_statement(name: str, database: str) -> sql.Composed:
    """CREATE or DROP DATABASE: identifiers cannot be bound as parameters, so they are quoted in."""
    return sql.SQL(package_queries("tenure.ops.demo")[name]).format(database=sql.Identifier(database))


@dataclass(frozen=True, slots=True)
class Progress:
    finished: int
    succeeded: int
    dead: int
    running: int
    expired: int
    fenced: int


class BankQueries:
    """The bank's statements, with the Tenure schema they read substituted in."""

    def __init__(self, schema: str = "tenure") -> None:
        self._sql = package_queries("tenure.ops.demo", schema)

    async def _rows(self, conn: AsyncConnection[Any], name: str, params: Row | None = None) -> list[Row]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self._sql[name], params)
            return await cur.fetchall() if cur.description else []

    async def _one(self, conn: AsyncConnection[Any], name: str, params: Row | None = None) -> Row:
        rows = await self._rows(conn, name, params)
        return rows[0]

    # -- setting the bank up ----------------------------------------------------------------

    async def create_bank(self, conn: AsyncConnection[Any]) -> None:
        await self._rows(conn, "bank_create")

    async def open_accounts(self, conn: AsyncConnection[Any], balances: dict[int, int]) -> None:
        params = {"ids": list(balances), "balances": list(balances.values())}
        await self._rows(conn, "bank_open_accounts", params)

    # -- the transfer, inside the job's own transaction ----------------------------------------

    def lock_pair(self, tx: SyncTransaction, source: int, target: int) -> dict[int, int]:
        """Locks both accounts, lowest id first; returns their balances by id."""
        rows = tx.execute(self._sql["transfer_lock_accounts"], {"source": source, "target": target})
        return {r["id"]: r["balance"] for r in rows}

    def apply(self, tx: SyncTransaction, ctx: JobContext, *, source: int, target: int, amount: int) -> None:
        """Moves the money and writes the ledger row, keyed to the running job and its token."""
        job = {"job_id": ctx.job_id, "idempotency_key": ctx.idempotency_key, "token": ctx.token}
        tx.execute(self._sql["transfer_apply"], {**job, "source": source, "target": target, "amount": amount})

    # -- watching and reporting ---------------------------------------------------------------

    async def progress(self, conn: AsyncConnection[Any], task: str) -> Progress:
        return Progress(**await self._one(conn, "demo_progress", {"task": task}))

    async def running_by_owner(self, conn: AsyncConnection[Any], owner: str) -> int:
        return int((await self._one(conn, "demo_running_by_owner", {"owner": owner}))["running"])

    async def job_states(self, conn: AsyncConnection[Any], task: str) -> dict[str, int]:
        return {r["state"]: r["jobs"] for r in await self._rows(conn, "report_job_states", {"task": task})}

    async def dead_codes(self, conn: AsyncConnection[Any], task: str) -> dict[str, int]:
        return {r["code"]: r["jobs"] for r in await self._rows(conn, "report_dead_codes", {"task": task})}

    async def events(self, conn: AsyncConnection[Any]) -> list[Row]:
        return await self._rows(conn, "report_events", {})

    async def recovered_outcomes(self, conn: AsyncConnection[Any], task: str) -> dict[str, int]:
        rows = await self._rows(conn, "report_recovered_outcomes", {"task": task})
        return {r["state"]: r["jobs"] for r in rows}

    async def invariant(self, conn: AsyncConnection[Any], name: str, task: str | None = None) -> Row:
        """One row of figures for the invariant query `invariant_<name>`."""
        return await self._one(conn, f"invariant_{name}", {"task": task} if task is not None else {})

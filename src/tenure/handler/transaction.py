"""Running a unit of work in one transaction (the rules are in tenure.handler.txn): written once, async;
tools/async_to_sync.py writes its blocking twin (tenure.handler.sync_transaction)."""

from __future__ import annotations

import asyncio
import contextlib
import time  # noqa: F401 - the blocking twin sleeps with it
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from tenure.handler.txn import (
    Query,
    T,
    Transaction,
    TransactionPolicy,
    check_not_aborted,
    decide,
    raise_reported,
    recording,
    setup_statements,
)

ASYNC = True


class AsyncTransaction(Transaction[AsyncConnection[Any]]):
    """What a unit of work receives: `execute`, `savepoint`, and `conn` itself."""

    async def execute(self, query: Query, params: Any = None) -> list[dict[str, Any]]:
        """Runs one statement and returns its rows as dicts (empty for statements without rows)."""
        try:
            async with self.conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(query, params)
                return await cur.fetchall() if cur.description else []
        except psycopg.Error as exc:
            self._record(exc)
            raise

    @contextlib.asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """Rolls back to here on an expected local failure, keeping the outer transaction."""
        recorded = self.first_error
        try:
            async with self.conn.transaction():
                yield
        except Exception:
            # Rolled back to the savepoint: whatever failed inside no longer aborts the unit.
            self.first_error = recorded
            raise


async def run_transaction(
    source: AsyncConnectionPool[Any] | AsyncConnection[Any],
    work: Callable[[AsyncTransaction], Awaitable[T]],
    *,
    policy: TransactionPolicy | None = None,
    request_id: str | None = None,
) -> T:
    """Runs `work` in a transaction, retrying the whole unit on 40001/40P01."""
    policy = policy or TransactionPolicy()
    request_id = request_id or uuid.uuid4().hex
    attempt = 0
    while True:
        attempt += 1
        async with _connection(source) as conn:
            tx = AsyncTransaction(conn, request_id, attempt)
            try:
                with recording(tx):
                    async with conn.transaction():
                        for stmt, params in setup_statements(policy):
                            await conn.execute(stmt.encode(), params)
                        result = await work(tx)
                        check_not_aborted(tx)
                return result
            except Exception as exc:
                reported, wait = decide(exc, tx, attempt, policy)
                if wait is None:
                    raise_reported(reported, exc)
        await asyncio.sleep(wait or 0.0)


@contextlib.asynccontextmanager
async def _connection(
    source: AsyncConnectionPool[Any] | AsyncConnection[Any],
) -> AsyncIterator[AsyncConnection[Any]]:
    if isinstance(source, AsyncConnection):
        yield source
    else:
        async with source.connection() as conn:
            yield conn

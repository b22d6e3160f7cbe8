"""The transaction runner (T1-T5).

A unit of work is a function of a `Transaction`. The runner opens the transaction, bounds lock
waits, and on a serialization failure (40001) or deadlock (40P01) rolls back and runs the WHOLE
unit again, with jittered backoff, up to a bound. Whatever fails, the connection is rolled back
before it is reused, and the error reported is the FIRST one the unit hit: never the 25P02
("current transaction is aborted") that PostgreSQL raises for every statement after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import AsyncConnection, Connection, IsolationLevel, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from tenure.db._sqlfiles import plain_queries
from tenure.errors import (
    IN_FAILED_TRANSACTION,
    LOCK_NOT_AVAILABLE,
    RETRYABLE_SQLSTATES,
    Contention,
    RetriesExhausted,
)
from tenure.retry import Backoff

T = TypeVar("T")
C = TypeVar("C", AsyncConnection[Any], Connection[Any])
Query = str | bytes | sql.SQL | sql.Composed


@dataclass(frozen=True)
class TransactionPolicy:
    """How a unit of work is run: retry bound, backoff, isolation and lock wait bound."""

    max_attempts: int = 5
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.01, cap=1.0, jitter=1.0))
    isolation: IsolationLevel | None = None
    lock_timeout_ms: int | None = 5000


class Transaction(Generic[C]):
    """One attempt of a unit of work: the connection, plus first-error bookkeeping."""

    def __init__(self, conn: C, request_id: str, attempt: int) -> None:
        self.conn: C = conn
        self.request_id = request_id
        self.attempt = attempt
        self.first_error: psycopg.Error | None = None

    def _record(self, exc: psycopg.Error) -> None:
        if self.first_error is None and exc.sqlstate != IN_FAILED_TRANSACTION:
            self.first_error = exc


class AsyncTransaction(Transaction[AsyncConnection[Any]]):
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
        """Rolls back to here on an expected local failure, keeping the outer transaction (T3)."""
        recorded = self.first_error
        try:
            async with self.conn.transaction():
                yield
        except psycopg.Error:
            self.first_error = recorded  # handled here, so not the unit's first error
            raise


class SyncTransaction(Transaction[Connection[Any]]):
    def execute(self, query: Query, params: Any = None) -> list[dict[str, Any]]:
        try:
            with self.conn.cursor(row_factory=dict_row) as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description else []
        except psycopg.Error as exc:
            self._record(exc)
            raise

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        recorded = self.first_error
        try:
            with self.conn.transaction():
                yield
        except psycopg.Error:
            self.first_error = recorded
            raise


def first_error(exc: BaseException, tx: Transaction[Any]) -> BaseException:
    """The error to report: the earliest real database error behind `exc`, if any."""
    if tx.first_error is not None:
        return tx.first_error
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for candidate in reversed(chain):
        if isinstance(candidate, psycopg.Error) and candidate.sqlstate != IN_FAILED_TRANSACTION:
            return candidate
    return exc


def _decide(
    exc: BaseException, tx: Transaction[Any], attempt: int, policy: TransactionPolicy
) -> tuple[BaseException, float | None]:
    """(error to raise, or seconds to wait before the whole unit runs again)."""
    reported = first_error(exc, tx)
    if isinstance(reported, psycopg.Error):
        if reported.sqlstate in RETRYABLE_SQLSTATES:
            if attempt < policy.max_attempts:
                return reported, policy.backoff.delay(attempt)
            return RetriesExhausted(attempt, reported), None
        if reported.sqlstate == LOCK_NOT_AVAILABLE:
            return Contention(reported), None
    return reported, None


def _raise(reported: BaseException, original: BaseException) -> None:
    if reported is original:
        raise original
    if original is not reported and isinstance(original, psycopg.Error):
        reported.add_note(f"later in the same transaction: {original.sqlstate}: {original}")
    raise reported from (reported.__cause__ or None)


_ISOLATION_QUERY = {
    IsolationLevel.SERIALIZABLE: "txn_isolation_serializable",
    IsolationLevel.REPEATABLE_READ: "txn_isolation_repeatable_read",
}


def _setup_statements(policy: TransactionPolicy) -> list[tuple[str, dict[str, Any] | None]]:
    """The statements that open each attempt: isolation first, then the lock wait bound."""
    queries = plain_queries()
    stmts: list[tuple[str, dict[str, Any] | None]] = []
    if policy.isolation in _ISOLATION_QUERY:
        stmts.append((queries[_ISOLATION_QUERY[policy.isolation]], None))
    if policy.lock_timeout_ms is not None:
        stmts.append((queries["txn_lock_timeout"], {"lock_timeout": f"{policy.lock_timeout_ms}ms"}))
    return stmts


async def run_transaction(
    source: AsyncConnectionPool[Any] | AsyncConnection[Any],
    work: Callable[[AsyncTransaction], Awaitable[T]],
    *,
    policy: TransactionPolicy | None = None,
    request_id: str | None = None,
) -> T:
    """Runs `work` in a transaction, retrying the whole unit on 40001/40P01 (T1, T2, T5)."""
    policy = policy or TransactionPolicy()
    request_id = request_id or uuid.uuid4().hex
    attempt = 0
    while True:
        attempt += 1
        async with _connection(source) as conn:
            tx = AsyncTransaction(conn, request_id, attempt)
            try:
                async with conn.transaction():
                    for stmt, params in _setup_statements(policy):
                        await conn.execute(stmt.encode(), params)
                    return await work(tx)
            except Exception as exc:
                reported, wait = _decide(exc, tx, attempt, policy)
                if wait is None:
                    _raise(reported, exc)
        await asyncio.sleep(wait or 0.0)


def run_transaction_sync(
    source: ConnectionPool[Any] | Connection[Any],
    work: Callable[[SyncTransaction], T],
    *,
    policy: TransactionPolicy | None = None,
    request_id: str | None = None,
) -> T:
    """The blocking twin of `run_transaction`, for plain-function handlers and sync callers."""
    policy = policy or TransactionPolicy()
    request_id = request_id or uuid.uuid4().hex
    attempt = 0
    while True:
        attempt += 1
        with _connection_sync(source) as conn:
            tx = SyncTransaction(conn, request_id, attempt)
            try:
                with conn.transaction():
                    for stmt, params in _setup_statements(policy):
                        conn.execute(stmt.encode(), params)
                    return work(tx)
            except Exception as exc:
                reported, wait = _decide(exc, tx, attempt, policy)
                if wait is None:
                    _raise(reported, exc)
        time.sleep(wait or 0.0)


@contextlib.asynccontextmanager
async def _connection(
    source: AsyncConnectionPool[Any] | AsyncConnection[Any],
) -> AsyncIterator[AsyncConnection[Any]]:
    if isinstance(source, AsyncConnection):
        yield source
    else:
        async with source.connection() as conn:
            yield conn


@contextlib.contextmanager
def _connection_sync(source: ConnectionPool[Any] | Connection[Any]) -> Iterator[Connection[Any]]:
    if isinstance(source, Connection):
        yield source
    else:
        with source.connection() as conn:
            yield conn

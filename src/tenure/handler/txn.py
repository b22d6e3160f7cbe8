"""The transaction runner's rules, shared by the async runner (tenure.handler.transaction) and its
blocking twin (tenure.handler.sync_transaction).

A unit of work is a function of a `Transaction`. The runner opens the transaction, bounds lock
waits, and on a serialization failure (40001) or deadlock (40P01) rolls back and runs the WHOLE
unit again, with jittered backoff, up to a bound. Whatever fails, the connection is rolled back
before it is reused. A 25P02 ("current transaction is aborted"), which PostgreSQL raises for
every statement after an error, is reported as the error that aborted the transaction; every
other exception, the caller's own included, is reported as raised.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor, IsolationLevel, sql
from psycopg.pq import TransactionStatus

from tenure.db.sqlfiles import plain_queries
from tenure.model.errors import (
    IN_FAILED_TRANSACTION,
    LOCK_NOT_AVAILABLE,
    RETRYABLE_SQLSTATES,
    Contention,
    RetriesExhausted,
    TransactionError,
)
from tenure.model.retry import Backoff

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
        # Any error but 25P02 is the one that aborted the transaction as it stands now: an earlier
        # one can only be followed by another after a savepoint rolled it back.
        if exc.sqlstate != IN_FAILED_TRANSACTION:
            self.first_error = exc


#: The transaction attempt each connection is running, so that errors raised by statements run
#: directly on `tx.conn` (not through `tx.execute`) are recorded too.
_ACTIVE: weakref.WeakKeyDictionary[Any, Transaction[Any]] = weakref.WeakKeyDictionary()


def _seen(conn: Any, exc: psycopg.Error) -> None:
    tx = _ACTIVE.get(conn)
    if tx is not None:
        tx._record(exc)


class _RecordingAsyncCursor(AsyncCursor[Any]):
    async def execute(self, *args: Any, **kwargs: Any) -> Self:
        try:
            return await super().execute(*args, **kwargs)
        except psycopg.Error as exc:
            _seen(self.connection, exc)
            raise

    async def executemany(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().executemany(*args, **kwargs)
        except psycopg.Error as exc:
            _seen(self.connection, exc)
            raise


class _RecordingCursor(Cursor[Any]):
    def execute(self, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().execute(*args, **kwargs)
        except psycopg.Error as exc:
            _seen(self.connection, exc)
            raise

    def executemany(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().executemany(*args, **kwargs)
        except psycopg.Error as exc:
            _seen(self.connection, exc)
            raise


@contextlib.contextmanager
def recording(tx: Transaction[Any]) -> Iterator[None]:
    """Records the errors of every statement run on the connection during this attempt."""
    conn = tx.conn
    original = conn.cursor_factory
    recording: type[Any] | None = None
    if original is AsyncCursor:
        recording = _RecordingAsyncCursor
    elif original is Cursor:
        recording = _RecordingCursor
    outer = _ACTIVE.get(conn)  # a unit run inside another unit on the same connection
    _ACTIVE[conn] = tx
    if recording is not None:
        conn.cursor_factory = recording
    try:
        yield
    finally:
        if outer is None:
            _ACTIVE.pop(conn, None)
        else:
            _ACTIVE[conn] = outer
        if recording is not None:
            conn.cursor_factory = original


def check_not_aborted(tx: Transaction[Any]) -> None:
    """A unit that caught a database error and returned must not look committed: PostgreSQL
    answers COMMIT of an aborted transaction with a silent ROLLBACK."""
    if tx.conn.info.transaction_status == TransactionStatus.INERROR:
        if tx.first_error is not None:
            raise tx.first_error
        raise TransactionError(
            "the unit of work caught a database error and returned, so nothing was committed; "
            "let the error propagate, or wrap the statement in tx.savepoint()"
        )


def first_error(exc: BaseException, tx: Transaction[Any]) -> BaseException:
    """The error to report for `exc`: `exc` itself, except when it is the 25P02 ("current
    transaction is aborted") that follows an earlier error, which it then stands in for.

    Only a 25P02 is replaced. Any other exception, and above all the caller's own (`raise
    AlreadyThere() from None` in an `except UniqueViolation`, in a savepoint or not), is what
    the caller decided to raise, and is reported as it is.
    """
    if not (isinstance(exc, psycopg.Error) and exc.sqlstate == IN_FAILED_TRANSACTION):
        return exc
    if tx.first_error is not None:
        return tx.first_error
    # Statements run through a cursor class the runner does not record: look behind the 25P02.
    seen: BaseException | None = exc.__cause__ or exc.__context__
    while seen is not None and seen is not exc:
        if isinstance(seen, psycopg.Error) and seen.sqlstate != IN_FAILED_TRANSACTION:
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


def decide(
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


def raise_reported(reported: BaseException, original: BaseException) -> None:
    if reported is original:
        raise original
    if original is not reported and isinstance(original, psycopg.Error):
        reported.add_note(f"later in the same transaction: {original.sqlstate}: {original}")
    raise reported from (reported.__cause__ or None)


_ISOLATION_QUERY = {
    IsolationLevel.SERIALIZABLE: "txn_isolation_serializable",
    IsolationLevel.REPEATABLE_READ: "txn_isolation_repeatable_read",
}


def setup_statements(policy: TransactionPolicy) -> list[tuple[str, dict[str, Any] | None]]:
    """The statements that open each attempt: isolation first, then the lock wait bound."""
    queries = plain_queries()
    stmts: list[tuple[str, dict[str, Any] | None]] = []
    if policy.isolation in _ISOLATION_QUERY:
        stmts.append((queries[_ISOLATION_QUERY[policy.isolation]], None))
    if policy.lock_timeout_ms is not None:
        stmts.append((queries["txn_lock_timeout"], {"lock_timeout": f"{policy.lock_timeout_ms}ms"}))
    return stmts

# Generated from src/tenure/handler/transaction.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Running a unit of work in one transaction (the rules are in tenure.handler.txn): written once, async;
tools/async_to_sync.py writes its blocking twin (tenure.handler.sync_transaction)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

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


class SyncTransaction(Transaction[Connection[Any]]):
    """What a unit of work receives: `execute`, `savepoint`, and `conn` itself."""

    def execute(self, query: Query, params: Any = None) -> list[dict[str, Any]]:
        """Runs one statement and returns its rows as dicts (empty for statements without rows)."""
        try:
            with self.conn.cursor(row_factory=dict_row) as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description else []
        except psycopg.Error as exc:
            self._record(exc)
            raise

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Rolls back to here on an expected local failure, keeping the outer transaction."""
        recorded = self.first_error
        try:
            with self.conn.transaction():
                yield
        except Exception:
            # Rolled back to the savepoint: whatever failed inside no longer aborts the unit.
            self.first_error = recorded
            raise


def run_transaction_sync(
    source: ConnectionPool[Any] | Connection[Any],
    work: Callable[[SyncTransaction], T],
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
        with _connection(source) as conn:
            tx = SyncTransaction(conn, request_id, attempt)
            try:
                with recording(tx), conn.transaction():
                    for stmt, params in setup_statements(policy):
                        conn.execute(stmt.encode(), params)
                    result = work(tx)
                    check_not_aborted(tx)
                return result
            except Exception as exc:
                reported, wait = decide(exc, tx, attempt, policy)
                if wait is None:
                    raise_reported(reported, exc)
        time.sleep(wait or 0.0)


@contextlib.contextmanager
def _connection(
    source: ConnectionPool[Any] | Connection[Any],
) -> Iterator[Connection[Any]]:
    if isinstance(source, Connection):
        yield source
    else:
        with source.connection() as conn:
            yield conn

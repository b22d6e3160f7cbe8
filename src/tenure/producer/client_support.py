"""What the async client and its blocking twin share besides their code: how database errors
reach the caller, the transactions a blocking enqueue joins, and where a result waiter listens."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg
from psycopg import Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from tenure.db.connect import LISTEN_DSN_ENV, connection_lost, describe_dsn, is_connection_lost, unavailable
from tenure.db.migrate_hint import migrate_hint
from tenure.model.errors import DatabaseUnavailable, SchemaNotMigrated
from tenure.model.registration import register_once

log = logging.getLogger("tenure.client")

MISSING_SCHEMA = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedObject,
)


class JoiningClient(Protocol):
    """What a provider of open transactions is told of the client that asks: its server."""

    @property
    def dsn(self) -> str | None: ...


#: Given a SyncClient, yields the connection whose open transaction a blocking enqueue without
#: `conn` must join, or None when there is none (the client's pool then commits the job at once);
#: raises rather than let the job commit on its own while such a transaction is open.
OpenTransaction = Callable[["JoiningClient"], AbstractContextManager["Connection[Any] | None"]]
#: Frameworks whose transactions are opened out of Tenure's sight register one here (the Django
#: contrib: a view's atomic() block), so a plain `task.enqueue_sync(...)` is not a dual write.
OPEN_TRANSACTIONS: list[OpenTransaction] = []


def join_open_transactions(provider: OpenTransaction) -> Callable[[], None]:
    """Registers `provider` for every SyncClient of this process: each blocking enqueue given no
    `conn` asks it for the transaction to join. Registering it again does nothing. Returns a
    function that removes it."""
    return register_once(OPEN_TRANSACTIONS, provider)


def log_lost_wakeup(exc: BaseException) -> None:
    log.warning(
        "jobs enqueued, but the notification that wakes workers for them failed (%s): workers "
        "find them at their next poll",
        str(exc).strip() or type(exc).__name__,
    )


def listen_dsn(pool: AsyncConnectionPool[Any] | ConnectionPool[Any]) -> str | None:
    """Where a result waiter LISTENs: $TENURE_LISTEN_DSN when set (a direct connection, the pool
    going through PgBouncer in transaction mode, where a LISTEN hears nothing), else the pool's
    server (None, a pool that computes its DSN: the waiter polls)."""
    return os.environ.get(LISTEN_DSN_ENV) or (pool.conninfo if isinstance(pool.conninfo, str) else None)


def connection_error(dsn: str, exc: psycopg.Error) -> DatabaseUnavailable | None:
    """What the caller sees of a database error: no free connection or no server is
    DatabaseUnavailable, a connection lost under a statement says its commit is in doubt, and
    any other error (None) is the caller's own (a constraint, a permission) and passes as it is."""
    if isinstance(exc, PoolTimeout):
        return unavailable(dsn, exc)
    if is_connection_lost(exc):
        return connection_lost(dsn, exc)
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return DatabaseUnavailable(
            f"PostgreSQL at {describe_dsn(dsn)} is read-only just now (a standby, or a database set "
            "read-only): nothing was written. Write again once it accepts writes, or point the DSN at "
            "the primary (a multi-host DSN with target_session_attrs=read-write finds it)"
        )
    return None


def not_migrated(schema: str, feature: str | None = None) -> SchemaNotMigrated:
    if feature is not None:
        return SchemaNotMigrated(
            f"the Tenure schema {schema!r} is older than {feature}: {migrate_hint(schema)} to upgrade it"
        )
    return SchemaNotMigrated(
        f"the Tenure schema {schema!r} is missing from this database: {migrate_hint(schema)}"
    )

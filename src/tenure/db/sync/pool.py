# Generated from src/tenure/db/pool.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Tenure's connection pools: autocommit connections that read values as Tenure's do, checked
before they open. Written once, async; tools/async_to_sync.py writes its blocking twin
(tenure.db.sync.pool), which the blocking client opens."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from tenure.db.adapters import use_tenure_adapters
from tenure.db.connect import (
    application_name,
    check_before_pool_sync,
    prepare_threshold,
    unavailable,
)


def configure_pooled(conn: Connection[Any]) -> None:
    """The pool's `configure` hook: each new connection reads values as Tenure's do."""
    use_tenure_adapters(conn)


def open_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    name: str = "tenure",
    timeout: float = 10.0,
    prepare: int | str | None = "env",
    check: bool = False,
) -> ConnectionPool[Any]:
    """A pool of autocommit connections. Nothing on them depends on session state, so they work
    through PgBouncer in transaction mode. `prepare="env"` takes the threshold from the environment. With
    `check`, each connection is tested as it is lent (one round trip), so a server restart or
    failover costs no failed request: for callers that are idle for long and cannot retry.

    Through a pooler proven not to keep prepared statements between transactions, the pool
    prepares none, and says so once in the log (tenure.db.pooler)."""
    wanted = prepare_threshold() if isinstance(prepare, str) else prepare
    threshold = check_before_pool_sync(dsn, wanted, timeout=timeout, name=name)
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        timeout=timeout,
        check=ConnectionPool.check_connection if check else None,
        configure=configure_pooled,
        kwargs={"autocommit": True, "prepare_threshold": threshold, **application_name(dsn, name)},
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        pool.close()
        cause = exc
        try:
            probe = psycopg.Connection.connect(dsn, connect_timeout=int(timeout))
            probe.close()
        except psycopg.OperationalError as probe_exc:
            cause = probe_exc
        raise unavailable(dsn, cause) from None
    return pool

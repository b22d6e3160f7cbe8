"""Tenure's connection pools: autocommit connections that read values as Tenure's do, checked
before they open. Written once, async; tools/async_to_sync.py writes its blocking twin
(tenure.db.sync.pool), which the blocking client opens."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tenure.db.adapters import use_tenure_adapters
from tenure.db.connect import (
    application_name,
    check_before_pool,
    prepare_threshold,
    unavailable,
)

ASYNC = True


async def configure_pooled(conn: AsyncConnection[Any]) -> None:
    """The pool's `configure` hook: each new connection reads values as Tenure's do."""
    use_tenure_adapters(conn)


async def open_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    name: str = "tenure",
    timeout: float = 10.0,
    prepare: int | str | None = "env",
    check: bool = False,
) -> AsyncConnectionPool[Any]:
    """A pool of autocommit connections. Nothing on them depends on session state, so they work
    through PgBouncer in transaction mode. `prepare="env"` takes the threshold from the environment. With
    `check`, each connection is tested as it is lent (one round trip), so a server restart or
    failover costs no failed request: for callers that are idle for long and cannot retry.

    Through a pooler proven not to keep prepared statements between transactions, the pool
    prepares none, and says so once in the log (tenure.db.pooler)."""
    wanted = prepare_threshold() if isinstance(prepare, str) else prepare
    threshold = await check_before_pool(dsn, wanted, timeout=timeout, name=name)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        timeout=timeout,
        check=AsyncConnectionPool.check_connection if check else None,
        configure=configure_pooled,
        kwargs={"autocommit": True, "prepare_threshold": threshold, **application_name(dsn, name)},
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        await pool.close()
        cause = exc
        try:
            probe = await psycopg.AsyncConnection.connect(dsn, connect_timeout=int(timeout))
            await probe.close()
        except psycopg.OperationalError as probe_exc:
            cause = probe_exc
        raise unavailable(dsn, cause) from None
    return pool

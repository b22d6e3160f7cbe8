"""A busy loop's kept connection on a real pool: its statements go through one backend, a failed
statement gives the connection back for the pool to judge, a second use at once gets a connection
of its own, and an idle or stopped loop gives its connection back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tenure.db.pool import open_pool
from tenure.worker import kept_connection
from tenure.worker.kept_connection import KeptConnection


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool = await open_pool(dsn, min_size=3, max_size=3)
    yield pool
    await pool.close()


async def backend(kept: KeptConnection) -> int:
    async with kept.use() as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


def lent(pool: AsyncConnectionPool[Any]) -> int:
    stats = pool.get_stats()
    return int(stats["pool_size"]) - int(stats["pool_available"])


async def test_every_statement_of_a_busy_loop_goes_through_one_backend(
    pool: AsyncConnectionPool[Any],
) -> None:
    """The pool lends its connections in turn; the kept one is the same for every statement."""
    kept = KeptConnection(pool, bound=5.0)
    assert len({await backend(kept) for _ in range(10)}) == 1
    assert lent(pool) == 1
    await kept.release()
    assert lent(pool) == 0


async def test_a_failed_statement_gives_the_connection_back_to_the_pool(
    pool: AsyncConnectionPool[Any],
) -> None:
    """After an error the connection's state is unknown: the pool gets it back, the next use takes one."""
    kept = KeptConnection(pool, bound=5.0)
    await backend(kept)
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with kept.use() as conn:
            await conn.execute("SELECT 1 / 0")
    assert lent(pool) == 0
    await backend(kept)
    assert lent(pool) == 1
    await kept.release()


async def test_a_statement_past_the_bound_is_cancelled_and_its_connection_given_back(
    pool: AsyncConnectionPool[Any],
) -> None:
    """The bound covers the statement, as for every worker statement; the connection goes back."""
    kept = KeptConnection(pool, bound=0.3)
    with pytest.raises(TimeoutError):
        async with kept.use() as conn:
            await conn.execute("SELECT pg_sleep(5)")
    assert await backend(kept) > 0  # a working connection again
    await kept.release()


async def test_a_second_use_at_once_gets_a_connection_of_its_own(pool: AsyncConnectionPool[Any]) -> None:
    """Two statements at once never share one connection."""
    kept = KeptConnection(pool, bound=5.0)
    async with kept.use() as outer, kept.use() as inner:
        assert inner is not outer
        assert lent(pool) == 2
    assert lent(pool) == 1
    await kept.release()


async def test_an_idle_loop_gives_its_connection_back(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that sends nothing for IDLE_SECONDS holds no connection from the pool."""
    monkeypatch.setattr(kept_connection, "IDLE_SECONDS", 0.05)
    await backend(KeptConnection(pool, bound=5.0))
    assert lent(pool) == 1
    for _ in range(100):
        if not lent(pool):
            break
        await asyncio.sleep(0.02)
    assert lent(pool) == 0


async def test_a_connection_kept_past_the_hold_goes_back_after_its_statement(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """However busy the loop, the pool's own care (lifetime, reconnection) reaches the connection."""
    monkeypatch.setattr(kept_connection, "HOLD_SECONDS", 0.0)
    kept = KeptConnection(pool, bound=5.0)
    await backend(kept)
    assert lent(pool) == 0

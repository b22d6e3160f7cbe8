"""A client whose connection is lost under a statement says so, names the doubt about its commit,
and carries on with a fresh connection; concurrent first uses share one pool."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection

import tenure.producer.client
from tenure import Client, DatabaseUnavailable, SyncClient


async def _terminate_waiting(db: AsyncConnection[Any], application_name: str) -> None:
    """Terminates the session named `application_name` once it waits on a lock, mid-statement."""
    for _ in range(200):
        row = await (
            await db.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database() "
                "AND wait_event_type = 'Lock'",
                (application_name,),
            )
        ).fetchone()
        if row is not None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no session {application_name!r} came to wait on the lock")


async def _sessions(db: AsyncConnection[Any], application_name: str) -> int:
    row = await (
        await db.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (application_name,),
        )
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_async_client_reports_a_lost_connection_and_recovers(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """An enqueue whose connection is terminated mid-statement raises DatabaseUnavailable saying
    the commit is in doubt (not a raw psycopg error); the next enqueue succeeds on a new one."""
    async with Client(dsn) as client, await AsyncConnection.connect(dsn) as locker:
        await locker.execute("LOCK TABLE tenure.jobs IN ACCESS EXCLUSIVE MODE")
        enqueue = asyncio.create_task(client.enqueue("t", {}, queue="default"))
        await _terminate_waiting(db, "tenure-client")
        with pytest.raises(DatabaseUnavailable, match=r"lost the connection.*may or may not have landed"):
            await enqueue
        await locker.rollback()
        await client.enqueue("t", {}, queue="default")


async def test_sync_client_reports_a_lost_connection_like_the_async_one(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """SyncClient maps a connection terminated mid-statement to the same DatabaseUnavailable as
    Client, then recovers: the blocking API has the async one's error mapping."""
    with SyncClient(dsn) as client:
        async with await AsyncConnection.connect(dsn) as locker:
            await locker.execute("LOCK TABLE tenure.jobs IN ACCESS EXCLUSIVE MODE")
            enqueue = asyncio.create_task(asyncio.to_thread(client.enqueue, "t", {}, queue="default"))
            await _terminate_waiting(db, "tenure-sync")
            with pytest.raises(DatabaseUnavailable, match="lost the connection"):
                await enqueue
        await asyncio.to_thread(client.enqueue, "t", {}, queue="default")


async def test_a_constraint_error_passes_through_unchanged(dsn: str) -> None:
    """An error of the caller's own making is not dressed up as a lost connection."""
    async with Client(dsn) as client:
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with client._conn(None) as conn:  # the mapping under test
                await conn.execute("SELECT 1 / 0")


async def test_concurrent_first_enqueues_open_one_pool(
    dsn: str, db: AsyncConnection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty enqueues racing on a fresh client open one pool, not a pool each (the others'
    connections would outlive close()); after close() none of its sessions is left."""
    opened: list[object] = []
    real_open_pool = tenure.producer.client.open_pool

    async def counted_open_pool(*args: Any, **kwargs: Any) -> Any:
        pool = await real_open_pool(*args, **kwargs)
        opened.append(pool)
        return pool

    monkeypatch.setattr(tenure.producer.client, "open_pool", counted_open_pool)
    client = Client(dsn)
    try:
        await asyncio.gather(*(client.enqueue("t", {}, queue="default") for _ in range(20)))
    finally:
        await client.close()
    assert len(opened) == 1
    for _ in range(100):  # a closed connection's backend leaves pg_stat_activity a moment later
        if await _sessions(db, "tenure-client") == 0:
            break
        await asyncio.sleep(0.02)
    assert await _sessions(db, "tenure-client") == 0


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "sync"])
async def test_an_enqueue_on_a_read_only_database_says_nothing_was_written(
    dsn: str, db: AsyncConnection[Any], blocking: bool
) -> None:
    """On a database that accepts no writes (a standby, or set read-only), both clients raise
    DatabaseUnavailable saying so and that nothing was written, not the server's raw error."""
    name = (await (await db.execute("SELECT current_database()")).fetchone() or [""])[0]
    await db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    try:
        if blocking:
            with (
                SyncClient(dsn) as sync_client,
                pytest.raises(DatabaseUnavailable, match=r"read-only.*nothing was written"),
            ):
                await asyncio.to_thread(sync_client.enqueue, "t.any", queue="q")
        else:
            async with Client(dsn) as client:
                with pytest.raises(DatabaseUnavailable, match=r"read-only.*nothing was written"):
                    await client.enqueue("t.any", queue="q")
    finally:
        await db.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    assert await (await db.execute("SELECT count(*) FROM tenure.jobs")).fetchone() == (0,)

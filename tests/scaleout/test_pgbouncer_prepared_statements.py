"""Prepared statements through PgBouncer in transaction mode, on the PgBouncer installed here.

Before 1.21 PgBouncer cannot carry a prepared statement from one transaction to the next: psycopg
prepares its statements (after `prepare_threshold` runs) on whichever server session the pooler
lent it, and a later run lands on another. Tenure proves this with a probe before any pool
prepares statements through a pooler, and then prepares none there, saying so once in the log: running
behind PgBouncer needs no setting.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import psycopg
import pytest
from _bouncer import Bouncer, WorkerProcesses, states, wait_until

import tenure
from tenure.db.connect import PREPARE_THRESHOLD_ENV, connect
from tenure.db.pool import open_pool
from tenure.db.pooler import behind_pooler, is_lost_prepared_statement, prepared_statements_carried
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec
from tenure.worker.health import ServiceHealthBoard

FIX = re.compile(r"--prepare-threshold none .*TENURE_PREPARE_THRESHOLD=none")


def installed_version(bouncer: Bouncer) -> tuple[int, ...]:
    """PgBouncer's version, from its admin console (a normal connection cannot ask)."""
    with psycopg.connect(
        host=bouncer.host, port=bouncer.port, user=bouncer.user, dbname="pgbouncer", autocommit=True
    ) as conn:
        [[text]] = conn.execute("SHOW VERSION").fetchall()
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    assert found, text
    return tuple(int(part) for part in found.groups())


@pytest.fixture
def without_prepared_statement_support(pgbouncer: Bouncer) -> Bouncer:
    """The installed PgBouncer, which these tests expect to be one that cannot carry prepared
    statements in transaction mode (Debian 12 ships 1.18)."""
    version = installed_version(pgbouncer)
    assert version < (1, 21), (
        f"PgBouncer {version} supports prepared statements in transaction mode: set "
        "max_prepared_statements in the fixture and test the default threshold through it instead"
    )
    return pgbouncer


async def test_a_connection_through_pgbouncer_is_told_from_a_direct_one(dsn: str, pooled_dsn: str) -> None:
    """The server session's pid differs from the startup's only through the pooler."""
    async with await psycopg.AsyncConnection.connect(pooled_dsn, autocommit=True) as pooled:
        assert await behind_pooler(pooled)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as direct:
        assert not await behind_pooler(direct)


async def test_a_prepared_statement_is_lost_in_the_next_transaction(
    pooled_dsn: str, without_prepared_statement_support: Bouncer
) -> None:
    """A statement prepared in one transaction is gone once another client holds its server session."""
    async with (
        await psycopg.AsyncConnection.connect(pooled_dsn, autocommit=True) as first,
        await psycopg.AsyncConnection.connect(pooled_dsn) as other,
    ):
        query = "SELECT pg_backend_pid(), %s::int"
        [(session, _)] = await (await first.execute(query, [1], prepare=True)).fetchall()
        [(held,)] = await (await other.execute("SELECT pg_backend_pid()")).fetchall()
        assert held == session, "the pooler lent the idle session to the next transaction"
        with pytest.raises(psycopg.errors.InvalidSqlStatementName, match='"_pg3_0" does not exist') as lost:
            await first.execute(query, [1], prepare=True)
        assert is_lost_prepared_statement(lost.value)
        await other.rollback()


async def test_the_probe_proves_pgbouncer_loses_prepared_statements_and_pools_prepare_none(
    pooled_dsn: str, without_prepared_statement_support: Bouncer, caplog: pytest.LogCaptureFixture
) -> None:
    """The probe proves the loss; a pool asked to prepare opens with prepared statements off and
    says so once, naming the pooler and the PgBouncer that would carry them."""

    async def reconnect(autocommit: bool) -> psycopg.AsyncConnection[Any]:
        return await connect(pooled_dsn, autocommit=autocommit)

    assert await prepared_statements_carried(reconnect) is False
    caplog.set_level(logging.WARNING, logger="tenure.db")
    for _ in range(2):
        pool = await open_pool(pooled_dsn, prepare=5)
        async with pool.connection() as conn:
            assert conn.prepare_threshold is None
        await pool.close()
    told = [r.getMessage() for r in caplog.records if "prepares no statements there" in r.getMessage()]
    assert len(told) == 1 and "does not keep them between transactions" in told[0], caplog.text


async def test_a_direct_pool_with_prepared_statements_opens(dsn: str) -> None:
    """Without a pooler in between, a pool keeps the default threshold."""
    pool = await open_pool(dsn, prepare=5)
    async with pool.connection() as conn:
        assert conn.prepare_threshold == 5
    await pool.close()


async def test_clients_prepare_nothing_through_pgbouncer_with_no_setting(
    pooled_dsn: str, monkeypatch: pytest.MonkeyPatch, without_prepared_statement_support: Bouncer
) -> None:
    """Client and SyncClient, left at the default threshold, enqueue through PgBouncer with prepared
    statements off: more enqueues than the threshold, and none meets a lost statement."""
    monkeypatch.delenv(PREPARE_THRESHOLD_ENV, raising=False)
    async with tenure.Client(pooled_dsn) as client:
        for _ in range(10):
            await client.enqueue("pooled.noop", queue="pooled")
        async with (await client.pool()).connection() as conn:
            assert conn.prepare_threshold is None

    def sync_enqueue() -> None:
        with tenure.SyncClient(pooled_dsn) as sync_client:
            for _ in range(10):
                sync_client.enqueue("pooled.noop", queue="pooled")
            with sync_client.pool().connection() as conn:
                assert conn.prepare_threshold is None

    await asyncio.to_thread(sync_enqueue)


async def test_a_worker_at_the_default_threshold_drains_through_pgbouncer(
    db: psycopg.AsyncConnection[Any],
    pooled_dsn: str,
    workers: WorkerProcesses,
    monkeypatch: pytest.MonkeyPatch,
    without_prepared_statement_support: Bouncer,
) -> None:
    """A `tenure worker` given no prepared-statement setting drains through PgBouncer, and its log
    says once that it prepares nothing there."""
    monkeypatch.delenv(PREPARE_THRESHOLD_ENV, raising=False)
    await Queries("tenure").job_insert_many(db, [JobSpec(task="pooled.noop", queue="pooled")] * 20)
    worker = workers.start(pooled_dsn, "--poll-interval", "0.2")

    async def drained() -> bool:
        return await states(db) == {"succeeded": 20}

    await wait_until(drained, timeout=30, what="20 jobs to succeed", workers=(worker,))
    assert worker.stop() == 0
    assert " ".join(worker.log().split()).count("Tenure prepares no statements there") == 1, worker.log()


async def test_a_prepared_statement_lost_at_run_time_stops_the_worker_naming_the_fix(
    pooled_dsn: str, without_prepared_statement_support: Bouncer
) -> None:
    """A lost prepared statement met by a worker service makes its health fatal at once, naming the fix."""
    async with (
        await psycopg.AsyncConnection.connect(pooled_dsn, autocommit=True) as first,
        await psycopg.AsyncConnection.connect(pooled_dsn) as other,
    ):
        await first.execute("SELECT 1", prepare=True)
        await other.execute("SELECT 1")
        with pytest.raises(psycopg.Error) as lost:
            await first.execute("SELECT 1", prepare=True)
        await other.rollback()
    board = ServiceHealthBoard(failure_limit=120.0)
    board.service("claimer").failed(lost.value)
    reason = board.fatal()
    assert reason is not None and FIX.search(reason), reason

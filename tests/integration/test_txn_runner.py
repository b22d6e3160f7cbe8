"""The transaction runner against real errors provoked with a second connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection, IsolationLevel
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

import tenure
from tenure import Backoff, TransactionPolicy, run_transaction, run_transaction_sync
from tenure.handler.sync_transaction import SyncTransaction
from tenure.handler.transaction import AsyncTransaction

FAST = Backoff(base=0.001, cap=0.01, jitter=1.0)
SERIALIZABLE = TransactionPolicy(max_attempts=5, backoff=FAST, isolation=IsolationLevel.SERIALIZABLE)

SETUP = """
CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO acct VALUES (1, 0), (2, 0);
CREATE TABLE attempt_log (attempt int NOT NULL, request_id text NOT NULL);
CREATE TABLE uq (id int CONSTRAINT uq_pkey PRIMARY KEY, note text NOT NULL DEFAULT 'x');
INSERT INTO uq VALUES (1);
"""


@pytest.fixture
async def tables(db: AsyncConnection[Any]) -> AsyncConnection[Any]:
    await db.execute(SETUP)
    return db


@pytest.fixture
async def other(dsn: str) -> Any:
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
async def runner_conn(dsn: str) -> Any:
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        yield conn


async def commit_write_skew(other: AsyncConnection[Any]) -> None:
    """Reads both rows and writes row 2 in a SERIALIZABLE transaction that commits."""
    async with other.transaction():
        await other.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        await other.execute("SELECT sum(v) FROM acct")
        await other.execute("UPDATE acct SET v = v + 1 WHERE id = 2")


async def rows(conn: AsyncConnection[Any], query: str) -> list[tuple[Any, ...]]:
    return await (await conn.execute(query)).fetchall()


async def test_serialization_failure_reruns_whole_unit(tables, other, runner_conn) -> None:
    """A real 40001 (write skew) reruns the whole unit; attempt 2 succeeds with the same request id."""
    seen: list[tuple[int, str]] = []

    async def unit(tx: AsyncTransaction) -> int:
        seen.append((tx.attempt, tx.request_id))
        await tx.execute("INSERT INTO attempt_log VALUES (%s, %s)", (tx.attempt, tx.request_id))
        await tx.execute("SELECT sum(v) FROM acct")
        if tx.attempt == 1:
            await commit_write_skew(other)
        await tx.execute("UPDATE acct SET v = v + 10 WHERE id = 1")
        return tx.attempt

    result = await run_transaction(runner_conn, unit, policy=SERIALIZABLE, request_id="req-42")
    assert result == 2
    assert seen == [(1, "req-42"), (2, "req-42")]
    # The first attempt's writes rolled back as a whole; only the second attempt's remain.
    assert await rows(tables, "SELECT attempt, request_id FROM attempt_log") == [(2, "req-42")]
    assert await rows(tables, "SELECT id, v FROM acct ORDER BY id") == [(1, 10), (2, 1)]
    assert runner_conn.info.transaction_status == TransactionStatus.IDLE


async def test_deadlock_reruns_whole_unit(tables, other, runner_conn) -> None:
    """A real 40P01 (two rows locked in opposite order) reruns the whole unit, which then succeeds."""
    await other.execute("SET deadlock_timeout = '10s'")  # the runner's side detects the cycle
    blocked: asyncio.Task[Any] | None = None
    seen: list[int] = []

    async def unit(tx: AsyncTransaction) -> None:
        nonlocal blocked
        seen.append(tx.attempt)
        if tx.attempt == 2:
            assert blocked is not None
            await blocked  # the other side got row 1 once our first attempt rolled back
            await other.execute("COMMIT")
        await tx.execute("SELECT set_config('deadlock_timeout', '50ms', true)")
        await tx.execute("UPDATE acct SET v = v + 1 WHERE id = 1")
        if tx.attempt == 1:
            await other.execute("BEGIN")
            await other.execute("UPDATE acct SET v = v + 100 WHERE id = 2")
            blocked = asyncio.create_task(other.execute("UPDATE acct SET v = v + 100 WHERE id = 1"))
            await wait_until_blocked(tables, other.info.backend_pid)
        await tx.execute("UPDATE acct SET v = v + 1 WHERE id = 2")

    await run_transaction(runner_conn, unit, policy=TransactionPolicy(backoff=FAST))
    assert seen == [1, 2]
    assert await rows(tables, "SELECT id, v FROM acct ORDER BY id") == [(1, 101), (2, 101)]


async def wait_until_blocked(monitor: AsyncConnection[Any], pid: int) -> None:
    for _ in range(500):
        [(n,)] = await rows(monitor, f"SELECT cardinality(pg_blocking_pids({int(pid)}))")
        if n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"backend {pid} never blocked")


async def test_retry_bound_raises_retries_exhausted(tables, other, runner_conn) -> None:
    """A unit that hits a real 40001 on every attempt stops after max_attempts with RetriesExhausted."""
    attempts: list[int] = []

    async def unit(tx: AsyncTransaction) -> None:
        attempts.append(tx.attempt)
        await tx.execute("SELECT sum(v) FROM acct")
        await commit_write_skew(other)
        await tx.execute("UPDATE acct SET v = v + 10 WHERE id = 1")

    policy = TransactionPolicy(max_attempts=3, backoff=FAST, isolation=IsolationLevel.SERIALIZABLE)
    with pytest.raises(tenure.RetriesExhausted) as info:
        await run_transaction(runner_conn, unit, policy=policy)
    assert attempts == [1, 2, 3]
    assert info.value.attempts == 3 and info.value.sqlstate == "40001"
    assert isinstance(info.value.last, psycopg.errors.SerializationFailure)
    assert await rows(tables, "SELECT v FROM acct WHERE id = 1") == [(0,)]


async def test_first_error_reported_when_swallowed_on_raw_connection(tables, runner_conn) -> None:
    """A unique violation swallowed on tx.conn, then a 25P02: the runner raises the 23505, not the 25P02."""

    async def unit(tx: AsyncTransaction) -> None:
        await tx.execute("INSERT INTO acct VALUES (3, 0)")
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            await tx.conn.execute("INSERT INTO uq VALUES (1)")
        await tx.conn.execute("INSERT INTO acct VALUES (4, 0)")

    with pytest.raises(psycopg.Error) as info:
        await run_transaction(runner_conn, unit)
    assert isinstance(info.value, psycopg.errors.UniqueViolation)
    assert info.value.sqlstate == "23505" and info.value.diag.constraint_name == "uq_pkey"
    assert await rows(tables, "SELECT id FROM acct ORDER BY id") == [(1,), (2,)]
    assert runner_conn.info.transaction_status == TransactionStatus.IDLE


async def test_first_error_reported_when_swallowed_through_tx_execute(tables, runner_conn) -> None:
    """A unique violation swallowed around tx.execute, then a 25P02 from tx.execute: the 23505 is raised."""

    async def unit(tx: AsyncTransaction) -> None:
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            await tx.execute("INSERT INTO uq VALUES (1)")
        await tx.execute("SELECT 1")

    with pytest.raises(psycopg.Error) as info:
        await run_transaction(runner_conn, unit)
    assert isinstance(info.value, psycopg.errors.UniqueViolation)
    assert info.value.diag.constraint_name == "uq_pkey"
    assert runner_conn.info.transaction_status == TransactionStatus.IDLE


async def test_swallowed_error_is_not_reported_as_success(tables, runner_conn) -> None:
    """A unit that swallows a database error and returns does not 'succeed' with nothing committed."""

    async def unit(tx: AsyncTransaction) -> str:
        await tx.execute("INSERT INTO acct VALUES (3, 0)")
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            await tx.conn.execute("INSERT INTO uq VALUES (1)")
        return "done"

    with pytest.raises(psycopg.errors.UniqueViolation):
        await run_transaction(runner_conn, unit)
    assert await rows(tables, "SELECT count(*) FROM acct") == [(2,)]


async def test_savepoint_rolls_back_expected_failure_and_outer_commits(tables, runner_conn) -> None:
    """A failure inside tx.savepoint() undoes only the savepoint's writes; the rest of the unit commits."""

    async def unit(tx: AsyncTransaction) -> None:
        await tx.execute("INSERT INTO acct VALUES (3, 0)")
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with tx.savepoint():
                await tx.execute("INSERT INTO acct VALUES (4, 0)")
                await tx.execute("INSERT INTO uq VALUES (1)")
        await tx.execute("INSERT INTO acct VALUES (5, 0)")

    await run_transaction(runner_conn, unit)
    assert await rows(tables, "SELECT id FROM acct ORDER BY id") == [(1,), (2,), (3,), (5,)]


async def test_error_handled_in_savepoint_is_not_reported_later(tables, runner_conn) -> None:
    """After a savepoint absorbed a 23505, a later swallowed 23502 is the error reported, not the 23505."""

    async def unit(tx: AsyncTransaction) -> None:
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with tx.savepoint():
                await tx.execute("INSERT INTO uq VALUES (1)")
        with contextlib.suppress(psycopg.errors.NotNullViolation):
            await tx.conn.execute("INSERT INTO uq VALUES (2, NULL)")
        await tx.execute("SELECT 1")

    with pytest.raises(psycopg.Error) as info:
        await run_transaction(runner_conn, unit)
    assert info.value.sqlstate == "23502"


async def test_lock_wait_is_bounded_and_reported_as_contention(tables, other, runner_conn) -> None:
    """A unit blocked on a row lock held elsewhere raises Contention (55P03) after lock_timeout, once."""
    attempts: list[int] = []
    await other.execute("BEGIN")
    await other.execute("SELECT * FROM acct WHERE id = 1 FOR UPDATE")

    async def unit(tx: AsyncTransaction) -> None:
        attempts.append(tx.attempt)
        await tx.execute("UPDATE acct SET v = 1 WHERE id = 1")

    started = time.monotonic()
    with pytest.raises(tenure.Contention) as info:
        await run_transaction(runner_conn, unit, policy=TransactionPolicy(lock_timeout_ms=200))
    elapsed = time.monotonic() - started
    await other.execute("ROLLBACK")
    assert info.value.sqlstate == "55P03"
    assert not isinstance(info.value, tenure.RetriesExhausted)
    assert attempts == [1]  # contention is reported, not retried like a deadlock
    assert 0.15 <= elapsed < 3.0
    assert runner_conn.info.transaction_status == TransactionStatus.IDLE


async def test_pool_hands_out_idle_connection_after_every_failure(tables, other, dsn, caplog) -> None:
    """After every kind of failure the pool's next checkout is the same connection, already idle."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            pid = conn.info.backend_pid

        async def unique(tx: AsyncTransaction) -> None:
            await tx.execute("INSERT INTO uq VALUES (1)")

        async def swallowed(tx: AsyncTransaction) -> None:
            with contextlib.suppress(psycopg.Error):
                await tx.conn.execute("INSERT INTO uq VALUES (1)")

        async def python_error(tx: AsyncTransaction) -> None:
            await tx.execute("INSERT INTO acct VALUES (9, 9)")
            raise ValueError("not a database error")

        async def contended(tx: AsyncTransaction) -> None:
            await tx.execute("UPDATE acct SET v = 1 WHERE id = 2")

        async def skewed(tx: AsyncTransaction) -> None:
            await tx.execute("SELECT sum(v) FROM acct")
            await commit_write_skew(other)
            await tx.execute("UPDATE acct SET v = v + 10 WHERE id = 1")

        short = TransactionPolicy(max_attempts=2, backoff=FAST, lock_timeout_ms=100)
        cases = [
            (unique, psycopg.errors.UniqueViolation, short),
            (swallowed, psycopg.errors.UniqueViolation, short),
            (python_error, ValueError, short),
            (contended, tenure.Contention, short),
            (
                skewed,
                tenure.RetriesExhausted,
                TransactionPolicy(max_attempts=2, backoff=FAST, isolation=IsolationLevel.SERIALIZABLE),
            ),
        ]
        caplog.set_level(logging.WARNING, logger="psycopg.pool")
        for work, expected, policy in cases:
            if work is contended:
                await other.execute("BEGIN")
                await other.execute("SELECT * FROM acct WHERE id = 2 FOR UPDATE")
            with pytest.raises(expected):
                await run_transaction(pool, work, policy=policy)
            if work is contended:
                await other.execute("ROLLBACK")
            async with pool.connection() as conn:
                assert conn.info.transaction_status == TransactionStatus.IDLE, work.__name__
                assert conn.info.backend_pid == pid, work.__name__
                await conn.execute("SELECT 1")
        assert not [r for r in caplog.records if "rolling back" in r.getMessage()]
        assert await rows(tables, "SELECT count(*) FROM acct WHERE id = 9") == [(0,)]
    finally:
        await pool.close()


# -- the blocking twin -------------------------------------------------------------------------


def _sync_setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)


def test_sync_runner_reruns_on_serialization_failure(dsn: str) -> None:
    """run_transaction_sync reruns the whole unit on a real 40001 and the second attempt commits."""
    _sync_setup(dsn)
    seen: list[tuple[int, str]] = []
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as other,
    ):

        def unit(tx: SyncTransaction) -> int:
            seen.append((tx.attempt, tx.request_id))
            tx.execute("INSERT INTO attempt_log VALUES (%s, %s)", (tx.attempt, tx.request_id))
            tx.execute("SELECT sum(v) FROM acct")
            if tx.attempt == 1:
                with other.transaction():
                    other.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    other.execute("SELECT sum(v) FROM acct")
                    other.execute("UPDATE acct SET v = v + 1 WHERE id = 2")
            tx.execute("UPDATE acct SET v = v + 10 WHERE id = 1")
            return tx.attempt

        assert run_transaction_sync(conn, unit, policy=SERIALIZABLE, request_id="sync-1") == 2
        assert seen == [(1, "sync-1"), (2, "sync-1")]
        assert conn.execute("SELECT attempt FROM attempt_log").fetchall() == [(2,)]
        assert conn.execute("SELECT v FROM acct ORDER BY id").fetchall() == [(10,), (1,)]
        assert conn.info.transaction_status == TransactionStatus.IDLE


def test_sync_runner_reports_first_error(dsn: str) -> None:
    """run_transaction_sync reports the swallowed 23505 (with its constraint), never the 25P02 after it."""
    _sync_setup(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:

        def unit(tx: SyncTransaction) -> None:
            tx.execute("INSERT INTO acct VALUES (3, 0)")
            with contextlib.suppress(psycopg.errors.UniqueViolation):
                tx.conn.execute("INSERT INTO uq VALUES (1)")
            tx.execute("INSERT INTO acct VALUES (4, 0)")

        def via_tx(tx: SyncTransaction) -> None:
            with contextlib.suppress(psycopg.errors.UniqueViolation):
                tx.execute("INSERT INTO uq VALUES (1)")
            tx.conn.execute("SELECT 1")

        for work in (unit, via_tx):
            with pytest.raises(psycopg.Error) as info:
                run_transaction_sync(conn, work)
            assert isinstance(info.value, psycopg.errors.UniqueViolation), work.__name__
            assert info.value.diag.constraint_name == "uq_pkey"
            assert conn.info.transaction_status == TransactionStatus.IDLE
        assert conn.execute("SELECT count(*) FROM acct").fetchall() == [(2,)]


# -- the caller's own exception stands ---------------------------------------------------------


class AlreadyThere(Exception):
    """What a caller raises in place of a unique violation it expected."""


async def test_callers_exception_raised_from_none_in_a_savepoint_stands(tables, runner_conn) -> None:
    """`except UniqueViolation: raise AlreadyThere() from None` in a savepoint surfaces as AlreadyThere,
    and the unit's writes are rolled back."""

    async def unit(tx: AsyncTransaction) -> None:
        await tx.execute("INSERT INTO acct VALUES (3, 0)")
        try:
            async with tx.savepoint():
                await tx.execute("INSERT INTO uq VALUES (1)")
        except psycopg.errors.UniqueViolation:
            raise AlreadyThere("order 1 exists") from None

    with pytest.raises(AlreadyThere, match="order 1 exists") as info:
        await run_transaction(runner_conn, unit)
    assert info.value.__suppress_context__
    assert await rows(tables, "SELECT id FROM acct ORDER BY id") == [(1,), (2,)]
    assert runner_conn.info.transaction_status == TransactionStatus.IDLE


async def test_callers_exception_raised_from_a_database_error_stands(tables, runner_conn) -> None:
    """Without a savepoint too, `raise AlreadyThere() from exc` reaches the caller, its cause kept."""

    async def unit(tx: AsyncTransaction) -> None:
        try:
            await tx.conn.execute("INSERT INTO uq VALUES (1)")
        except psycopg.errors.UniqueViolation as exc:
            raise AlreadyThere("order 1 exists") from exc

    with pytest.raises(AlreadyThere) as info:
        await run_transaction(runner_conn, unit)
    assert isinstance(info.value.__cause__, psycopg.errors.UniqueViolation)
    assert runner_conn.info.transaction_status == TransactionStatus.IDLE


async def test_callers_exception_raised_for_an_aborted_transaction_stands(tables, runner_conn) -> None:
    """Even a caller's exception raised in place of a 25P02 is reported as the caller raised it."""

    async def unit(tx: AsyncTransaction) -> None:
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            await tx.execute("INSERT INTO uq VALUES (1)")
        try:
            await tx.execute("SELECT 1")
        except psycopg.errors.InFailedSqlTransaction:
            raise AlreadyThere("gave up") from None

    with pytest.raises(AlreadyThere, match="gave up"):
        await run_transaction(runner_conn, unit)


async def test_a_database_error_raised_while_handling_another_is_the_one_reported(
    tables, runner_conn
) -> None:
    """A 23502 raised while handling a 23505 that a savepoint absorbed is reported, not the 23505."""

    async def unit(tx: AsyncTransaction) -> None:
        try:
            async with tx.savepoint():
                await tx.execute("INSERT INTO uq VALUES (1)")
        except psycopg.errors.UniqueViolation:
            await tx.execute("INSERT INTO uq VALUES (2, NULL)")

    with pytest.raises(psycopg.Error) as info:
        await run_transaction(runner_conn, unit)
    assert info.value.sqlstate == "23502"


def test_sync_runner_lets_the_callers_exception_stand(dsn: str) -> None:
    """run_transaction_sync reports a caller's exception raised from a savepoint's 23505 as it is."""
    _sync_setup(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:

        def unit(tx: SyncTransaction) -> None:
            tx.execute("INSERT INTO acct VALUES (3, 0)")
            try:
                with tx.savepoint():
                    tx.execute("INSERT INTO uq VALUES (1)")
            except psycopg.errors.UniqueViolation:
                raise AlreadyThere("order 1 exists") from None

        with pytest.raises(AlreadyThere):
            run_transaction_sync(conn, unit)
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert conn.execute("SELECT count(*) FROM acct").fetchall() == [(2,)]

"""A busy loop's kept connection on a real pool: its statements go through one backend, a failed
statement gives the connection back for the pool to judge, a second use at once gets a connection
of its own, an idle or stopped loop gives its connection back, a claim prepared on an empty table
is planned again as it fills, and one prepared on a table that does not grow keeps its backend."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from _claims import CLAIM_ARGS
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec
from tenure.worker import kept_connection
from tenure.worker.kept_connection import KeptConnection


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool = await open_pool(dsn, min_size=3, max_size=3)
    yield pool
    await pool.close()


async def _select_one(conn: psycopg.AsyncConnection[Any]) -> None:
    """A warm statement for tests that are not about what it warms."""
    await conn.execute("SELECT 1")


async def _jobs_pages(conn: psycopg.AsyncConnection[Any]) -> int:
    return await Queries("tenure").jobs_pages(conn)


def _growing() -> kept_connection.Pages:
    """A table size that doubles at every look, for tests of the replacement itself."""
    looks = 0

    async def pages(conn: psycopg.AsyncConnection[Any]) -> int:
        nonlocal looks
        looks += 1
        return 100 * 2**looks

    return pages


async def backend(kept: KeptConnection) -> int:
    async with kept.use() as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


def lent(pool: AsyncConnectionPool[Any]) -> int:
    stats = pool.get_stats()
    return int(stats["pool_size"]) - int(stats["pool_available"])


async def given_back(pool: AsyncConnectionPool[Any]) -> None:
    """Waits, two seconds at most, until the pool lends no connection."""
    for _ in range(100):
        if not lent(pool):
            break
        await asyncio.sleep(0.02)
    assert lent(pool) == 0


async def test_every_statement_of_a_busy_loop_goes_through_one_backend(
    pool: AsyncConnectionPool[Any],
) -> None:
    """The pool lends its connections in turn; the kept one is the same for every statement."""
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
    assert len({await backend(kept) for _ in range(10)}) == 1
    assert lent(pool) == 1
    await kept.release()
    assert lent(pool) == 0


async def test_a_failed_statement_gives_the_connection_back_to_the_pool(
    pool: AsyncConnectionPool[Any],
) -> None:
    """After an error the connection's state is unknown: the pool gets it back, the next use takes one."""
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
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
    kept = KeptConnection(pool, bound=0.3, warm=_select_one, pages=_jobs_pages)
    with pytest.raises(TimeoutError):
        async with kept.use() as conn:
            await conn.execute("SELECT pg_sleep(5)")
    assert await backend(kept) > 0  # a working connection again
    await kept.release()


async def test_a_second_use_at_once_gets_a_connection_of_its_own(pool: AsyncConnectionPool[Any]) -> None:
    """Two statements at once never share one connection."""
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
    async with kept.use() as outer, kept.use() as inner:
        assert inner is not outer
        assert lent(pool) == 2
    assert lent(pool) == 1
    await kept.release()


async def test_the_kept_connection_s_cursor_serves_every_statement_and_a_lent_one_gets_none(
    pool: AsyncConnectionPool[Any],
) -> None:
    """cursor_for gives one cursor of the kept connection, statement after statement, each result
    read in full; none for the pool's connection lent to a second use, nor after a release."""
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
    cursors = []
    for n in range(3):
        async with kept.use() as conn:
            cur = kept.cursor_for(conn)
            assert cur is not None and cur.connection is conn
            await cur.execute("SELECT generate_series(1, %s)", (n + 1,))
            assert [row[0] for row in await cur.fetchall()] == list(range(1, n + 2))
            cursors.append(cur)
    assert cursors[0] is cursors[1] is cursors[2]
    async with kept.use() as outer, kept.use() as inner:
        assert kept.cursor_for(inner) is None
        assert kept.cursor_for(outer) is cursors[0]
    async with kept.use() as conn:
        await cursors[0].close()
        again = kept.cursor_for(conn)
        assert again is not None and again is not cursors[0] and not again.closed
    await kept.release()
    assert kept.cursor_for(cursors[0].connection) is None  # given back: no longer the kept one


async def test_a_claim_on_a_reused_cursor_keeps_it_open_for_one_job_and_closes_it_after_a_batch(
    dsn: str, queries: Queries
) -> None:
    """A reused cursor holds its last result until its next statement: a one-job claim's is kept,
    a batch's (every claimed payload) is let go by closing the cursor."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        args = {
            "queue": "default",
            "owner": "w",
            "default_lease_seconds": 30.0,
            "default_runtime_seconds": 60.0,
        }
        cur = conn.cursor()
        await queries.job_insert_many(conn, [JobSpec(task="t")])
        assert len(await queries.job_claim(conn, limit=10, cursor=cur, **args)) == 1
        assert not cur.closed
        await queries.job_insert_many(conn, [JobSpec(task="t")] * 3)
        assert len(await queries.job_claim(conn, limit=10, cursor=cur, **args)) == 3
        assert cur.closed


async def test_an_idle_loop_gives_its_connection_back(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that sends nothing for IDLE_SECONDS holds no connection from the pool."""
    monkeypatch.setattr(kept_connection, "IDLE_SECONDS", 0.05)
    await backend(KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages))
    assert lent(pool) == 1
    await given_back(pool)


async def test_a_loop_that_keeps_sending_keeps_its_connection_past_the_idle_time(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one idle timer, set at the first use, finds the loop busy when it fires and waits again
    from the last use: a loop sending every 20 ms keeps one backend for four idle times, and gives
    it back once it has been quiet for one."""
    monkeypatch.setattr(kept_connection, "IDLE_SECONDS", 0.05)
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
    first = await backend(kept)
    for _ in range(10):
        await asyncio.sleep(0.02)
        assert await backend(kept) == first
        assert lent(pool) == 1
    await given_back(pool)


async def test_a_connection_kept_past_the_hold_goes_back_after_its_statement(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """However busy the loop, the pool's own care (lifetime, reconnection) reaches the connection."""
    monkeypatch.setattr(kept_connection, "HOLD_SECONDS", 0.0)
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
    await backend(kept)
    assert lent(pool) == 0


async def _claim(kept: KeptConnection) -> int:
    async with kept.use() as conn:
        jobs = await Queries("tenure").job_claim(
            conn, queue="q", owner="w", limit=100, default_lease_seconds=30, default_runtime_seconds=60
        )
    return len(jobs)


async def _cached_claim_plan(kept: KeptConnection) -> str:
    """The plan of the claim prepared on the kept connection, as its next run would take it (a
    claim with no oldest share due: the by-priority lane alone)."""
    claim = Queries("tenure")._sql["job_claim_by_priority"]
    async with kept.use() as conn:
        cur = await conn.execute(
            "SELECT name FROM pg_prepared_statements WHERE statement LIKE %s", ["%lease_token + 1%"]
        )
        rows = await cur.fetchall()
        assert len(rows) == 1, rows
        names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", claim)))
        args = ", ".join(sql.Literal(CLAIM_ARGS[n]).as_string(conn) for n in names)
        cur = await conn.execute(f"EXPLAIN EXECUTE {rows[0][0]}({args})".encode())
        return "\n".join(r[0] for r in await cur.fetchall())


#: Runs after which a statement is prepared (psycopg's threshold, 5) and planned generically
#: (PostgreSQL plans a prepared statement for its values its first 5 runs).
PREPARED_AND_GENERIC = 12


async def _warm_claim(conn: psycopg.AsyncConnection[Any]) -> None:
    await Queries("tenure").job_claim(
        conn, queue="q", owner="w", limit=0, default_lease_seconds=30, default_runtime_seconds=60
    )


async def _settled(pool: AsyncConnectionPool[Any], expected: int) -> None:
    """Waits (two seconds at most) for the pool to have `expected` connections lent out."""
    for _ in range(100):
        if lent(pool) == expected:
            return
        await asyncio.sleep(0.02)
    assert lent(pool) == expected


async def _taken_over(kept: KeptConnection, old: int) -> int:
    """The backend the kept connection has once its successor took over (within two seconds)."""
    for _ in range(200):
        now = await backend(kept)
        if now != old:
            return now
        await asyncio.sleep(0.01)
    raise AssertionError("the warmed replacement never took over")


async def test_a_warmed_replacement_takes_over_without_a_statement_waiting_for_it(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a warm statement, the use at replan time still runs on the old connection while the
    successor is taken and warmed in the background; a later use runs on the successor, and the
    old connection is back in the pool."""
    monkeypatch.setattr(kept_connection, "REPLAN_AT", (0.2,))
    warmed: list[int] = []

    async def warm(conn: psycopg.AsyncConnection[Any]) -> None:
        warmed.append(conn.info.backend_pid)
        await _warm_claim(conn)

    kept = KeptConnection(pool, bound=5.0, warm=warm, pages=_growing())
    old = await backend(kept)
    await asyncio.sleep(0.25)
    assert await backend(kept) == old  # the replan time came: this use did not wait for a new one
    new = await _taken_over(kept, old)
    assert warmed == [new]
    await _settled(pool, 1)  # the old one back, the pool closing it as past its lifetime
    await kept.release()
    assert lent(pool) == 0


async def test_releasing_a_kept_connection_gives_back_its_successor_too(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that stops while a replacement is being warmed leaves no connection lent out."""
    monkeypatch.setattr(kept_connection, "REPLAN_AT", (0.1,))
    started = asyncio.Event()

    async def slow_warm(conn: psycopg.AsyncConnection[Any]) -> None:
        started.set()
        await conn.execute("SELECT pg_sleep(0.3)")

    kept = KeptConnection(pool, bound=5.0, warm=slow_warm, pages=_growing())
    await backend(kept)
    await asyncio.sleep(0.15)
    await backend(kept)  # the replan time came: the successor is being warmed
    await asyncio.wait_for(started.wait(), 5)
    assert lent(pool) == 2
    await kept.release()
    await _settled(pool, 0)  # the pool takes the cancelled warm-up's connection back in the background


async def test_a_claim_planned_on_an_empty_table_is_planned_again_on_a_warmed_replacement(
    pool: AsyncConnectionPool[Any], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the claimer keeps its connection: the replacement, warmed by a claim of no jobs, takes
    over and prepares the claim on the filled table, which it then reads by primary key."""
    monkeypatch.setattr(kept_connection, "REPLAN_AT", (0.5,))
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("VACUUM ANALYZE tenure.jobs")
        admin.execute("INSERT INTO tenure.jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 3)")
    kept = KeptConnection(pool, bound=5.0, warm=_warm_claim, pages=_jobs_pages)
    assert sum([await _claim(kept) for _ in range(PREPARED_AND_GENERIC)]) == 3
    assert "Seq Scan on jobs j" in await _cached_claim_plan(kept)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "INSERT INTO tenure.jobs (queue, task, state, finished_at) "
            "SELECT 'q', 't', 'succeeded', now() FROM generate_series(1, 30000)"
        )
    await asyncio.sleep(0.6)
    old = await backend(kept)  # starts the successor
    await _taken_over(kept, old)
    assert sum([await _claim(kept) for _ in range(PREPARED_AND_GENERIC)]) == 0
    plan = await _cached_claim_plan(kept)
    assert "Seq Scan on jobs" not in plan and "jobs_pkey" in plan, plan
    await kept.release()


async def test_a_claim_planned_on_a_filled_table_that_does_not_grow_keeps_its_backend(
    pool: AsyncConnectionPool[Any], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past every replan time, a kept connection whose table has not grown since its statements
    were planned is not replaced: its plans are the table's, and a replacement costs a backend."""
    monkeypatch.setattr(kept_connection, "REPLAN_AT", (0.1, 0.2))
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("INSERT INTO tenure.jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 3000)")
    warmed: list[int] = []

    async def warm(conn: psycopg.AsyncConnection[Any]) -> None:
        warmed.append(conn.info.backend_pid)

    kept = KeptConnection(pool, bound=5.0, warm=warm, pages=_jobs_pages)
    first = await backend(kept)
    assert await _claim(kept) == 100
    for _ in range(3):
        await asyncio.sleep(0.12)
        assert await backend(kept) == first
        await asyncio.sleep(0.05)  # the look at the table's size, in the background
    assert await backend(kept) == first
    assert warmed == []
    await _settled(pool, 1)  # the connection the look borrowed is back
    await kept.release()


async def test_a_table_size_that_cannot_be_read_does_not_stop_the_loop(
    pool: AsyncConnectionPool[Any],
) -> None:
    """The size looked at as the loop first uses its connection is a hint: refused, the
    loop's own statement still runs, on the connection the loop keeps."""

    async def refused(conn: psycopg.AsyncConnection[Any]) -> int:
        await conn.execute("SELECT pg_relation_size('no_such_table')")
        raise AssertionError("unreachable")

    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=refused)
    first = await backend(kept)
    assert await backend(kept) == first
    await kept.release()


async def test_an_idle_release_that_runs_after_a_use_began_leaves_that_use_its_connection(
    pool: AsyncConnectionPool[Any],
) -> None:
    """The idle timer's release runs in a task of its own, a loop iteration after the timer: a use
    that began in between keeps its connection (given back mid-statement, the pool closed it under
    the running query, which crashed the process)."""
    kept = KeptConnection(pool, bound=5.0, warm=_select_one, pages=_jobs_pages)
    first = await backend(kept)
    kept._last_used -= kept_connection.IDLE_SECONDS  # that use is now an idle time old
    kept._idle()  # the idle timer fires: its release is scheduled, not yet run
    async with kept.use() as conn:
        await conn.execute("SELECT pg_sleep(0.2)")  # the release task runs meanwhile
        cur = await conn.execute("SELECT pg_backend_pid()")
        assert (await cur.fetchone()) == (first,)
    assert await backend(kept) == first
    assert lent(pool) == 1
    await kept.release()

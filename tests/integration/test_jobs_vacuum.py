"""The worker's own vacuum of `jobs`: it runs when the dead row versions pass autovacuum's trigger
for the table and not before, it removes them, it backs off while an old snapshot keeps them, and
a running worker runs it."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from _inprocess import running
from psycopg import AsyncConnection

from tenure import JobContext, JobSpec, Tenure
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.model.errors import ConfigurationError
from tenure.ops.cli.worker import vacuum_check_every
from tenure.producer.client import Client
from tenure.worker.health import ServiceHealthBoard
from tenure.worker.maintenance import JobsVacuum
from tenure.worker.options import WorkerOptions
from tenure.worker.services import WorkerServices

CHECK_EVERY = 2.0
JOBS = 3000  # the migration's trigger for `jobs`: 1000 dead row versions + 1% of the live rows


@pytest.fixture
async def vacuum(dsn: str, queries: Queries) -> AsyncIterator[JobsVacuum]:
    pool = await open_pool(dsn, min_size=1, max_size=2)
    services = WorkerServices(pool=pool, queries=queries, options=WorkerOptions(), dsn=dsn)
    board = ServiceHealthBoard(120.0)
    service = JobsVacuum(
        dsn, "tenure", board.service(JobsVacuum.name), connection=services.connection, check_every=CHECK_EVERY
    )
    service.next_delay(False)  # the first check's random offset, taken
    yield service
    await pool.close()


async def enqueue(dsn: str, count: int) -> None:
    async with Client(dsn) as client:
        await client.enqueue_copy([JobSpec(task="noop", queue="idle") for _ in range(count)])


async def kill_rows(db: AsyncConnection[Any]) -> None:
    """Gives every job a new row version (a non-HOT update, as a claim's), its statistics sent at once."""
    async with db.transaction():  # the flush is forced at this transaction's end
        await db.execute("UPDATE tenure.jobs SET priority = priority + 1")
        await db.execute("SELECT pg_stat_force_next_flush()")


async def table_stats(db: AsyncConnection[Any]) -> tuple[int, int]:
    """(dead row versions, vacuums run by hand) of `jobs`, as the statistics have them now."""
    await db.execute("SELECT pg_stat_clear_snapshot()")
    row = await (
        await db.execute(
            "SELECT pg_stat_get_dead_tuples('tenure.jobs'::regclass),"
            " pg_stat_get_vacuum_count('tenure.jobs'::regclass)"
        )
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_a_vacuum_runs_once_dead_rows_pass_the_trigger_and_removes_them(
    dsn: str, db: AsyncConnection[Any], vacuum: JobsVacuum
) -> None:
    """Fresh rows are not due a vacuum; once every row has a dead version the check vacuums, the
    dead versions are gone, and the next check waits the usual interval."""
    await enqueue(dsn, JOBS)
    assert await vacuum.run_once() is False
    assert (await table_stats(db))[1] == 0
    await kill_rows(db)
    dead, _ = await table_stats(db)
    assert dead >= JOBS
    assert await vacuum.run_once() is True
    dead_after, vacuums = await table_stats(db)
    assert vacuums == 1 and dead_after < 100
    assert vacuum.next_delay(True) == CHECK_EVERY
    assert await vacuum.run_once() is False


async def test_vacuums_that_an_old_snapshot_makes_futile_back_off_until_it_ends(
    dsn: str, db: AsyncConnection[Any], vacuum: JobsVacuum
) -> None:
    """While a transaction's snapshot keeps the dead versions visible, each vacuum removes nothing
    and the next check waits twice as long; once it ends, a vacuum removes them and the wait is
    the usual one again."""
    await enqueue(dsn, JOBS)
    async with await psycopg.AsyncConnection.connect(dsn) as holder:
        await holder.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await holder.execute("SELECT count(*) FROM tenure.jobs")
        await kill_rows(db)
        delays = []
        for _ in range(3):
            assert await vacuum.run_once() is True
            delays.append(vacuum.next_delay(True))
        assert delays == [2 * CHECK_EVERY, 4 * CHECK_EVERY, 8 * CHECK_EVERY]
        await holder.rollback()
    assert await vacuum.run_once() is True
    assert vacuum.next_delay(True) == CHECK_EVERY
    assert (await table_stats(db))[0] < 100


async def test_a_running_worker_vacuums_jobs_when_it_is_due(dsn: str, db: AsyncConnection[Any]) -> None:
    """The worker runs the vacuum among its services: dead versions left by updates are gone
    within a few checks, with no job claimed."""
    app = Tenure(dsn)

    @app.task(name="elsewhere", queue="elsewhere")
    async def elsewhere(ctx: JobContext) -> None:
        pass

    await enqueue(dsn, JOBS)
    await kill_rows(db)
    async with running(app, vacuum_check_every=0.05):
        # Until a vacuum has removed them: one may find them still visible to a snapshot held
        # elsewhere on a busy shared server, and the worker then tries again after its backoff.
        for _ in range(400):
            dead, vacuums = await table_stats(db)
            if vacuums and dead < 100:
                break
            await asyncio.sleep(0.05)
    assert vacuums >= 1 and dead < 100, (vacuums, dead)


def test_the_check_interval_takes_seconds_or_off_and_refuses_the_rest() -> None:
    """`--vacuum-check-every 2.5` is 2.5 s, `off` leaves the table to autovacuum; 0, a negative
    number or a word is refused by the flag and by WorkerOptions, each naming what it takes."""
    assert vacuum_check_every("2.5") == 2.5 and vacuum_check_every("OFF") is None
    for bad in ("0", "-1", "often"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive number of seconds or 'off'"):
            vacuum_check_every(bad)
    assert WorkerOptions(vacuum_check_every=None).vacuum_check_every is None
    for wrong in (0, -2.0, True, "5"):
        with pytest.raises(ConfigurationError, match="vacuum_check_every must be a positive number"):
            WorkerOptions(vacuum_check_every=wrong)  # type: ignore[arg-type]

"""require_sync_replication: an enqueue is refused, writing nothing, while the primary has no
synchronous standby, and acknowledged once a real synchronous standby has the commit; a strict
worker writes no completion without one (the job is not reported done) and completes normally
with one."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from _servers import Server, local, wait_for

import tenure
from conftest import migrated_database
from tenure import Client, NoSynchronousStandby, SyncClient, Tenure, WorkerOptions
from tenure.db.replication import REQUIRE_SYNC_ENV


def jobs_on(dsn: str) -> list[tuple[int, str]]:
    with psycopg.connect(local(dsn), autocommit=True) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT id, state::text FROM tenure.jobs ORDER BY id")]


async def test_a_strict_enqueue_without_a_synchronous_standby_writes_nothing(
    lonely_dsn: str, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A primary waiting for an absent standby, and a single server without replication: the
    strict async and blocking clients (by option, and by the environment through the app) raise
    NoSynchronousStandby, naming why, and no job is written."""
    for where, why in ((lonely_dsn, "no synchronous standby is connected"), (dsn, "without replication")):
        async with Client(where, require_sync_replication=True) as client:
            with pytest.raises(NoSynchronousStandby, match=why):
                await client.enqueue("t", queue="default")
        blocking = SyncClient(where, require_sync_replication=True)
        with pytest.raises(NoSynchronousStandby, match="nothing was written"):
            blocking.enqueue("t", queue="default")
        blocking.close()
        assert jobs_on(where) == []
    monkeypatch.setenv(REQUIRE_SYNC_ENV, "1")
    app = Tenure(dsn)
    with pytest.raises(NoSynchronousStandby):
        await app.enqueue("t", queue="default")
    await app.close()
    assert jobs_on(dsn) == []
    monkeypatch.setenv(REQUIRE_SYNC_ENV, "maybe")
    with pytest.raises(tenure.ConfigurationError, match=REQUIRE_SYNC_ENV):
        Client(dsn)


async def test_a_strict_enqueue_is_acknowledged_once_a_real_synchronous_standby_has_it(
    synchronous_pair: tuple[Server, Server],
) -> None:
    """With a streaming synchronous standby the strict enqueue returns its jobs, which the standby
    holds."""
    main, replica = synchronous_pair
    dsn = await migrated_database(main)
    async with Client(dsn, require_sync_replication=True) as client:
        job = await client.enqueue("t", queue="default")
        [batch_1, batch_2] = await client.enqueue_many(
            [tenure.JobSpec(task="t", queue="default"), tenure.JobSpec(task="t", queue="default")]
        )
    # Flushed there before the acknowledgement; readable once the standby has replayed it.
    on_standby = dsn.replace(f"port={main.port}", f"port={replica.port}")

    def replayed() -> list[int]:
        try:
            return [i for i, _ in jobs_on(on_standby)]
        except psycopg.errors.UndefinedTable:
            return []

    wait_for(lambda: replayed() == [job.id, batch_1.id, batch_2.id], "the standby to replay the jobs")


def strict_app(dsn: str) -> tuple[Tenure, list[int]]:
    app = Tenure(dsn, require_sync_replication=True)
    ran: list[int] = []

    @app.task(name="t")
    async def t(ctx: tenure.JobContext) -> None:
        ran.append(ctx.job_id)

    return app, ran


async def run_until(worker: Any, done: Any, timeout: float = 30.0) -> None:
    """Runs `worker` until `done()` holds (or `timeout` passes), then stops it."""
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(int(timeout / 0.05)):
            if done():
                break
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)


async def test_a_strict_worker_without_a_synchronous_standby_reports_no_job_done(dsn: str) -> None:
    """On a server without replication the strict worker runs the job but writes no completion:
    the job is not succeeded, and the worker counts no success, only failed writes."""
    app, ran = strict_app(dsn)
    [job] = await Client(dsn).enqueue_many([tenure.JobSpec(task="t", queue="default")])
    worker = app.worker(WorkerOptions(poll_interval=0.05, lease_seconds=3, listen=False))
    assert worker.options.require_sync_replication, "the app's setting holds for its worker"
    await run_until(worker, lambda: worker.stats.write_errors >= 2)
    await app.close()
    assert ran == [job.id]
    assert worker.stats.succeeded == 0 and worker.stats.write_errors >= 2, worker.stats
    assert dict(jobs_on(dsn))[job.id] != "succeeded"


async def test_a_strict_worker_with_a_synchronous_standby_completes(
    synchronous_pair: tuple[Server, Server],
) -> None:
    """With a real synchronous standby the strict worker's completion is confirmed and counted."""
    main, _ = synchronous_pair
    dsn = await migrated_database(main)
    app, ran = strict_app(dsn)
    job = await app.enqueue("t")
    worker = app.worker(WorkerOptions(poll_interval=0.05, lease_seconds=10, listen=False))
    await run_until(worker, lambda: worker.stats.succeeded >= 1)
    await app.close()
    assert ran == [job.id]
    assert worker.stats.succeeded == 1 and worker.stats.not_replicated == 0, worker.stats
    wait_for(lambda: jobs_on(dsn) == [(job.id, "succeeded")], "the job to be succeeded")

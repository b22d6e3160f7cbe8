"""A commit PostgreSQL answers with "canceling wait for synchronous replication ... might not have
been replicated" is never reported as acknowledged: the enqueue (async and blocking client, on
the pool or on the caller's connection) raises NotReplicated naming the jobs committed on the
primary, and a worker reports such a completion (plain or in ctx.atomic) as not replicated.

The warning is real: a private primary waits for a synchronous standby that never comes, and a
session cancels each waiting commit with pg_cancel_backend, as an HA engine turning synchronous
replication off does."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest
from _servers import Server, SyncWaitCanceller, local
from prometheus_client import CollectorRegistry

import tenure
from tenure import Client, JobSpec, NotReplicated, SyncClient, Tenure, WorkerOptions
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.ops.metrics import RuntimeMetrics
from tenure.worker.completer import Completer, CompletionOutcome
from tenure.worker.services import WorkerServices


def stored(dsn: str) -> dict[int, str]:
    with psycopg.connect(local(dsn), autocommit=True) as conn:
        rows = conn.execute("SELECT id, state::text FROM tenure.jobs ORDER BY id").fetchall()
    return {r[0]: r[1] for r in rows}


async def test_an_async_enqueue_whose_commit_may_not_be_replicated_raises_with_its_job_ids(
    lonely: Server, lonely_dsn: str
) -> None:
    """One job and a batch, each cancelled in its wait for the standby: NotReplicated names the
    jobs, which are committed on the primary."""
    async with Client(lonely_dsn) as client:
        with SyncWaitCanceller(lonely) as canceller:
            with pytest.raises(NotReplicated) as one:
                await client.enqueue("t", {"n": 1}, queue="default")
            with pytest.raises(NotReplicated) as batch:
                specs = [
                    JobSpec(task="t", queue="default"),
                    JobSpec(task="t", queue="default", payload={"n": 2}),
                ]
                await client.enqueue_many(specs)
    assert canceller.cancelled
    assert len(one.value.job_ids) == 1 and len(batch.value.job_ids) == 2
    assert "might not be on a standby" in str(one.value)
    assert stored(lonely_dsn) == {i: "pending" for i in (*one.value.job_ids, *batch.value.job_ids)}


def test_a_blocking_enqueue_whose_commit_may_not_be_replicated_raises_with_its_job_id(
    lonely: Server, lonely_dsn: str
) -> None:
    """The generated blocking client raises NotReplicated as the async one does."""
    client = SyncClient(lonely_dsn)
    try:
        with SyncWaitCanceller(lonely), pytest.raises(NotReplicated) as caught:
            client.enqueue("t", {"n": 1}, queue="default")
    finally:
        client.close()
    [job_id] = caught.value.job_ids
    assert stored(lonely_dsn) == {job_id: "pending"}


async def test_an_enqueue_on_the_callers_connection_is_watched_where_tenure_commits(
    lonely: Server, lonely_dsn: str
) -> None:
    """On the caller's autocommit connection the enqueue commits by itself: NotReplicated. Inside
    the caller's transaction the caller's COMMIT gets the warning: tenure.watch_commits sees it."""
    async with (
        Client(lonely_dsn) as client,
        await psycopg.AsyncConnection.connect(lonely_dsn, autocommit=True) as conn,
    ):
        with SyncWaitCanceller(lonely), pytest.raises(NotReplicated) as caught:
            await client.enqueue("t", conn=conn, queue="default")
        assert len(caught.value.job_ids) == 1
        with SyncWaitCanceller(lonely), tenure.watch_commits(conn) as watch:
            async with conn.transaction():
                inside = await client.enqueue("t", conn=conn, queue="default")
        assert watch.not_replicated, "the caller's commit was answered with the warning"
    assert set(stored(lonely_dsn)) == {caught.value.job_ids[0], inside.id}


async def test_the_completer_reports_a_completion_that_may_not_be_replicated(
    lonely: Server, lonely_dsn: str
) -> None:
    """A completion batch whose commit is cancelled in its wait: each caller learns
    not_replicated, and the jobs are succeeded on the primary."""
    queries = Queries("tenure")
    async with await psycopg.AsyncConnection.connect(local(lonely_dsn), autocommit=True) as setup:
        await queries.job_insert_many(setup, [JobSpec(task="t"), JobSpec(task="t")])
        jobs = await queries.job_claim(
            setup, queue="default", owner="w", limit=2, default_lease_seconds=30, default_runtime_seconds=60
        )
    pool = await open_pool(lonely_dsn, min_size=1, max_size=2)
    try:
        options = WorkerOptions(worker_id="w")
        completer = Completer(WorkerServices(pool=pool, queries=queries, options=options, dsn=lonely_dsn))
        lease_end = completer.clock.monotonic() + 30
        waiting = [asyncio.create_task(completer.complete(job, lease_end)) for job in jobs]
        await asyncio.sleep(0)
        with SyncWaitCanceller(lonely):
            assert await completer.run_once() == 2
        assert await asyncio.gather(*waiting) == [CompletionOutcome.NOT_REPLICATED] * 2
    finally:
        await pool.close()
    assert stored(lonely_dsn) == {job.id: "succeeded" for job in jobs}


async def test_a_worker_counts_logs_and_measures_completions_that_may_not_be_replicated(
    lonely: Server, lonely_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain completion and a ctx.atomic one, both cancelled in their wait: the jobs stay
    succeeded, the worker counts them as succeeded and not replicated, logs each, and the
    finished-jobs metric says not_replicated."""
    app = Tenure(lonely_dsn)

    @app.task(name="plain")
    async def plain(ctx: tenure.JobContext) -> None:
        return None

    @app.task(name="atomic")
    async def atomic(ctx: tenure.JobContext) -> None:
        async def work(tx: Any) -> None:
            await tx.conn.execute("SELECT 1")

        await ctx.atomic(work)

    async with await psycopg.AsyncConnection.connect(local(lonely_dsn), autocommit=True) as setup:
        await Queries("tenure").job_insert_many(setup, [JobSpec(task="plain"), JobSpec(task="atomic")])
    worker = app.worker(WorkerOptions(poll_interval=0.05, lease_seconds=10, listen=False))
    metrics = RuntimeMetrics(CollectorRegistry(), busy=lambda: 0, concurrency=1)
    worker.events.subscribe(metrics)
    caplog.set_level(logging.WARNING, logger="tenure.worker")
    with SyncWaitCanceller(lonely):
        task = asyncio.create_task(worker.run())
        try:
            for _ in range(400):
                if worker.stats.not_replicated >= 2:
                    break
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 20)
            await app.close()
    assert worker.stats.not_replicated == 2 and worker.stats.succeeded == 2, worker.stats
    assert set(stored(lonely_dsn).values()) == {"succeeded"}
    said = [r.getMessage() for r in caplog.records if "not known to be on a standby" in r.getMessage()]
    assert len(said) == 2 and any("ctx.atomic" in s for s in said), said
    samples = metrics.finished.collect()[0].samples
    finished = {s.labels["outcome"]: s.value for s in samples if s.name.endswith("_total")}
    assert finished.get("not_replicated") == 2, finished

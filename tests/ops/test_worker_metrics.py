"""A real worker's /metrics endpoint, scraped while jobs flow and while a lease is made to expire:
every metric docs/metrics.md lists is there with a value that shows it measured something."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tenure
from tenure.ops.metrics.worker import attach

#: docs/metrics.md's metrics, item by item, and the sample that proves the item was measured.
M_METRICS = {
    "oldest claimable job age": "tenure_oldest_claimable_age_seconds",
    "claim latency per queue": "tenure_job_claim_latency_seconds_count",
    "completion latency per queue": "tenure_job_completion_seconds_count",
    "running jobs whose lease is close to expiry": "tenure_leases_near_expiry",
    "lease expirations": "tenure_leases_expired_total",
    "fencing losses": "tenure_fencing_losses_total",
    "retries by error code and attempt": "tenure_job_retries_total",
    "dead jobs": "tenure_dead_jobs",
    "age of the oldest unresolved dead job": "tenure_oldest_dead_age_seconds",
    "heartbeat failures": "tenure_heartbeat_failures_total",
    "claim query duration": "tenure_claim_query_seconds_count",
    "lock waits": "tenure_db_lock_waits",
    "connections in use": "tenure_db_connections",
    "worker throughput": "tenure_jobs_finished_total",
    "worker saturation": "tenure_worker_saturation",
}


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """GET /metrics and parse it: sample name -> [(labels, value)]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


async def until(probe: Callable[[], Awaitable[Any]], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        await asyncio.sleep(0.05)


async def state_of(dsn: str, job_id: int) -> str:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (
            await conn.execute("SELECT state::text FROM tenure.jobs WHERE id = %s", (job_id,))
        ).fetchone()
        return str(row[0]) if row else "missing"


@pytest.mark.slow
async def test_worker_endpoint_exposes_every_m_metric_with_real_values(dsn: str) -> None:
    """Scraped during a real run, every M metric has a non-zero sample, including a lease expiry."""
    app = tenure.Tenure(dsn)
    stop_progress = asyncio.Event()

    @app.task(name="ops.ok", queue="work")
    async def ok(ctx: tenure.JobContext) -> None:
        pass

    @app.task(name="ops.flaky", queue="work", max_attempts=3)
    async def flaky(ctx: tenure.JobContext) -> None:
        if ctx.attempt == 1:
            raise tenure.Transient("first attempt fails", code="FLAKY", delay=0.01)

    @app.task(name="ops.doomed", queue="work")
    async def doomed(ctx: tenure.JobContext) -> None:
        raise tenure.Permanent("cannot ever work", code="DOOMED")

    @app.task(name="ops.usurped", queue="work", max_attempts=1)
    async def usurped(ctx: tenure.JobContext) -> None:
        # Someone else's claim bumps the token under us: our completion must be refused.
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "UPDATE tenure.jobs SET lease_token = lease_token + 1 WHERE id = %s", (ctx.job_id,)
            )

    @app.task(name="ops.stall", queue="work", max_attempts=1)
    async def stall(ctx: tenure.JobContext) -> None:
        n = 0
        while not stop_progress.is_set():  # progress renews the lease ...
            n += 1
            ctx.progress(n)
            await asyncio.sleep(0.05)
        await asyncio.sleep(60)  # ... then silence: the lease runs out

    worker = app.worker(lease_seconds=1.0, concurrency=4, poll_interval=0.1)
    metrics = attach(worker, dsn=dsn, port=0, host="127.0.0.1")
    assert metrics.server is not None
    port = metrics.server.port
    running = asyncio.create_task(worker.run())
    seen: dict[str, float] = {}

    async def record() -> dict[str, list[tuple[dict[str, str], float]]]:
        samples = await asyncio.to_thread(scrape, port)
        for name, values in samples.items():
            seen[name] = max([seen.get(name, 0.0), *(v for _, v in values)])
        return samples

    try:
        await asyncio.wait_for(worker.started.wait(), 30)
        past = datetime.now(UTC) - timedelta(minutes=10)
        parked = await app.enqueue("ops.ok", {}, queue="parked", run_at=past)  # nobody serves 'parked'
        for _ in range(5):
            await app.enqueue(ok, {})
        jobs = {
            name: (await app.enqueue(task, {})).id
            for name, task in (("flaky", flaky), ("doomed", doomed), ("usurped", usurped), ("stall", stall))
        }

        async def settled() -> bool:
            states = {name: await state_of(dsn, job_id) for name, job_id in jobs.items()}
            return (
                states["flaky"] == "succeeded"
                and states["doomed"] == "dead"
                and states["stall"] == "running"
                and worker.stats.fencing_losses >= 1
            )

        await until(settled, "jobs to succeed, retry, die and be fenced while 'stall' runs")

        # A lock wait, live during the scrape: a session blocked on a row another one holds.
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as holder,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as waiter,
        ):
            async with holder.transaction():
                await holder.execute("SELECT 1 FROM tenure.jobs WHERE id = %s FOR UPDATE", (parked.id,))
                blocked = asyncio.create_task(
                    waiter.execute("UPDATE tenure.jobs SET priority = 1 WHERE id = %s", (parked.id,))
                )

                async def lock_wait_visible() -> bool:
                    samples = await record()
                    return any(v >= 1 for _, v in samples.get("tenure_db_lock_waits", []))

                await until(lock_wait_visible, "the blocked update to show as a lock wait")
            await blocked

        # Heartbeat failures: the database drops the worker's connections while 'stall' renews.
        async def heartbeat_failed() -> bool:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name = 'tenure-worker'"
                )
            await asyncio.sleep(0.2)
            return worker.stats.heartbeat_failures > 0

        await until(heartbeat_failed, "a heartbeat to fail on a dropped connection")

        stop_progress.set()  # the lease now expires; recovery makes the job dead (no attempts left)
        await until(lambda: _dead(dsn, jobs["stall"]), "the stalled job's lease to expire and be recovered")
        await until(lambda: _recovered(worker), "this worker's recovery to count the expiry")
        await record()
    finally:
        worker.stop(force=True)
        await asyncio.wait_for(running, 30)
        metrics.close()
        await app.close()

    missing = {item: name for item, name in M_METRICS.items() if seen.get(name, 0.0) <= 0}
    assert missing == {}, f"M metrics without a measured value: {missing}"
    assert seen["tenure_oldest_claimable_age_seconds"] >= 600  # the parked job, 10 minutes old


async def _dead(dsn: str, job_id: int) -> bool:
    return await state_of(dsn, job_id) == "dead"


async def _recovered(worker: tenure.Worker) -> bool:
    return worker.stats.recovered_dead + worker.stats.recovered_pending > 0


async def test_job_control_shows_in_the_metrics(dsn: str) -> None:
    """A revoked job, a snooze, a paused queue and a limited one are each visible on a scrape:
    the worker's revoke counter and snoozed outcome, the paused-queue gauge, the recent control
    acts and the limited queue's live leases."""
    app = tenure.Tenure(dsn)
    app.limit("work", max_running=50)
    started = asyncio.Event()

    @app.task(name="ops.blocks", queue="work")
    async def blocks(ctx: tenure.JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    @app.task(name="ops.snoozes", queue="work")
    async def snoozes(ctx: tenure.JobContext) -> Any:
        return tenure.Snooze(3600) if ctx.job.progress is None else None

    worker = app.worker(lease_seconds=5.0, poll_interval=0.1, queues=["work", "held"])
    metrics = attach(worker, dsn=dsn, port=0, host="127.0.0.1")
    assert metrics.server is not None
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 30)
        await app.pause_queue("held", reason="metrics test")
        blocked = await app.enqueue(blocks, {})
        snoozed = await app.enqueue(snoozes, {})
        await asyncio.wait_for(started.wait(), 10)
        await app.cancel([blocked.id], reason="metrics test")
        await until(lambda: _in_state(dsn, snoozed.id, "scheduled"), "the snooze")
        await until(lambda: _revoked(worker), "the worker to stop the revoked job")
        samples = await asyncio.to_thread(scrape, metrics.server.port)
    finally:
        worker.stop(force=True)
        await asyncio.wait_for(running, 30)
        metrics.close()
        await app.close()

    assert samples["tenure_jobs_revoked_total"] == [({"queue": "work"}, 1.0)]
    finished = {(labels["outcome"], v) for labels, v in samples["tenure_jobs_finished_total"]}
    assert ("snoozed", 1.0) in finished
    [(labels, paused_for)] = samples["tenure_queue_paused_seconds"]
    assert labels == {"queue": "held"} and paused_for >= 0
    acts = {labels["act"]: v for labels, v in samples["tenure_control_acts_recent"]}
    assert acts == {"revoke": 1.0, "snooze": 1.0}
    assert samples["tenure_queue_limit_running"] == [({"queue": "work", "limit": "50"}, 0.0)]


async def _in_state(dsn: str, job_id: int, state: str) -> bool:
    return await state_of(dsn, job_id) == state


async def _revoked(worker: tenure.Worker) -> bool:
    return worker.stats.revoked == 1

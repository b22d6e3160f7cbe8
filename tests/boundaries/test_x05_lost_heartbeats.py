"""X5: heartbeats are lost while a job works; the duplicate-execution window stays bounded.

The worker's local watchdog marks a job's lease lost once it has run out on the local clock,
even when the database cannot be reached, so the first execution ends about when the database
lets a second worker reclaim the job. A coroutine handler is cancelled there and then: its
window is one lease. A plain-function handler runs in a thread that nothing can stop from
outside; it learns of the loss (LeaseLost) at its next ctx.check() or ctx.progress(), so its
window is one lease plus the handler's own interval between checks, and it is bounded only if
the handler checks. Heartbeats renew a lease only on progress and never past the max
runtime.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from _harness import PartitionProxy, at, db_now, job_events, job_row, wait_for, wait_until

import tenure
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

LEASE = 1.0
#: Slack allowed on top of the lease: the watchdog's tick (lease/10), the claim's round trip and
#: scheduling on a busy 2-core machine. Generous on purpose: it proves a bound, not a speed (an
#: unwatched handler here would run its full 10 s).
MARGIN = 1.0 * LEASE
#: How often the thread handlers here check their lease: a thread's window grows by this much.
CHECK_EVERY = 0.25
#: How long past its loss each kind of handler may go on running before it stops.
STOPS_WITHIN = {"async": 0.0, "thread": CHECK_EVERY}


class Executions:
    """What each attempt of the job did, on this process's monotonic clock."""

    def __init__(self) -> None:
        self.runs: dict[int, dict[str, Any]] = {}

    def begin(self, token: int) -> dict[str, Any]:
        run = {"token": token, "start": time.monotonic(), "end": None, "how": "running"}
        self.runs[token] = run
        return run


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["no_progress", "partitioned"])
@pytest.mark.parametrize("handler", ["async", "thread"])
async def test_x05_watchdog_bounds_the_duplicate_execution_window(
    dsn: str,
    db: psycopg.AsyncConnection[Any],
    app: tenure.Tenure,
    start_worker: Any,
    fault: str,
    handler: str,
) -> None:
    """An unrenewed run stops within a lease (+ a thread's check interval) + margin; so does the overlap."""
    executions = Executions()
    proxy = await PartitionProxy(dsn).start()
    loop = asyncio.get_running_loop()
    victim: tenure.Worker | None = None

    if handler == "async":

        @app.task(name="x5.long", max_attempts=5)
        async def long_job(ctx: tenure.JobContext) -> None:
            run = executions.begin(ctx.token)
            try:
                if ctx.token >= 2:
                    await asyncio.sleep(0.2)  # the retry does its work and finishes
                else:
                    if fault == "partitioned":
                        proxy.partition()  # from here on, nothing the victim sends reaches the database
                    for step in range(int(10 / 0.05)):  # would run 10 s if nothing stopped it
                        await asyncio.sleep(0.05)
                        if fault == "partitioned":
                            ctx.progress({"step": step})  # progress the heartbeat can no longer deliver
                run["how"] = "finished"
            except asyncio.CancelledError:
                run["how"] = "cancelled"
                raise
            except tenure.LeaseLost:
                run["how"] = "lease_lost"
                raise
            finally:
                run["end"] = time.monotonic()

    else:

        async def cut() -> None:
            proxy.partition()

        @app.task(name="x5.long", max_attempts=5)
        def long_job_in_a_thread(ctx: tenure.JobContext) -> None:
            run = executions.begin(ctx.token)
            try:
                if ctx.token >= 2:
                    time.sleep(0.2)
                else:
                    if fault == "partitioned":
                        asyncio.run_coroutine_threadsafe(cut(), loop).result(timeout=5)
                    for step in range(int(10 / CHECK_EVERY)):  # would run 10 s if it never checked
                        time.sleep(CHECK_EVERY)
                        if fault == "partitioned":
                            ctx.progress({"step": step})  # checks the lease, then reports
                        else:
                            ctx.check()
                run["how"] = "finished"
            except tenure.LeaseLost:
                run["how"] = "lease_lost"
                # A lost thread keeps its worker slot until it returns.
                assert victim is not None and victim.executor is not None
                run["slot_held"] = (ctx.job_id, ctx.token) in victim.executor.running
                raise
            finally:
                run["end"] = time.monotonic()

    try:
        victim_app = tenure.Tenure(proxy.dsn)
        victim_app.registry = app.registry
        victim = await start_worker(victim_app, lease_seconds=LEASE, listen=False, poll_interval=0.1)
        job = await app.enqueue("x5.long")

        async def first_started() -> bool:
            return 1 in executions.runs

        await wait_until(first_started, timeout=10, what="the first execution to start")
        rescuer = await start_worker(
            app,
            lease_seconds=LEASE,
            poll_interval=0.1,
            recovery_interval=0.1,
            recovery_backoff=tenure.Backoff(base=0.01, cap=0.01, jitter=0.0),
        )

        async def succeeded() -> dict[str, Any] | None:
            row = await job_row(db, job.id)
            return row if row["state"] == "succeeded" else None

        final = await wait_until(succeeded, timeout=15, what="the retry to complete the job")

        async def first_ended() -> bool:
            return executions.runs[1]["end"] is not None

        await wait_until(first_ended, timeout=15, what="the first execution to stop")
    finally:
        await proxy.close()

    first, second = executions.runs[1], executions.runs[2]
    ran_for = first["end"] - first["start"]
    overlap = first["end"] - second["start"]
    late = STOPS_WITHIN[handler]
    print(
        f"\nX5 {handler}/{fault}: first execution ran {ran_for:.2f}s (bound {LEASE + late + MARGIN:.2f}s),"
        f" overlapped the retry by {overlap:.2f}s (bound {late + MARGIN:.2f}s)"
    )
    if handler == "async":
        assert first["how"] in ("cancelled", "lease_lost"), first
    else:
        assert first["how"] == "lease_lost" and first["slot_held"], first
    assert ran_for <= LEASE + late + MARGIN, f"first execution ran {ran_for:.2f}s on a {LEASE}s lease"
    assert overlap <= late + MARGIN, f"the two executions overlapped for {overlap:.2f}s"
    assert final["lease_token"] == 2
    assert victim.services is not None
    events = [(e["event"], e["token"], e["worker"]) for e in await job_events(db, job.id)]
    # The victim's own record of stopping the job (lease_lost) reaches the log unless the
    # partition keeps it out; nothing else is written under its token.
    owner = victim.services.owner
    assert events.count(("lease_expired", 1, owner)) == 1
    assert set(events) <= {("lease_expired", 1, owner), ("lease_lost", 1, owner)}
    assert events.count(("lease_lost", 1, owner)) <= 1
    assert victim.stats.leases_lost == 1
    # Without a partition the victim is healthy and may run the retry itself; with one, only
    # the rescuer can reach the database.
    assert victim.stats.succeeded + rescuer.stats.succeeded == 1
    if fault == "partitioned":
        assert rescuer.stats.succeeded == 1


async def test_x05_progress_renews_the_lease_past_its_length(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Injected clock: progress keeps a 10 s lease alive at 30 s; unchanged progress renews nothing."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t")])
    t0 = await db_now(db)
    [claimed] = await queries.job_claim(
        db,
        queue="default",
        owner="w",
        limit=1,
        default_lease_seconds=10,
        default_runtime_seconds=3600,
        now=t0,
    )
    token = claimed.lease.token
    for step, when in enumerate((8, 16, 24), start=1):
        [ext] = await queries.lease_extend_many(
            db, owner="w", renewals=[(job.id, token, {"step": step}, 10)], now=at(t0, when)
        )
        assert ext.expires_at == at(t0, when + 10)
    # Same marker again: a live process with no progress is not renewed.
    assert (
        await queries.lease_extend_many(
            db, owner="w", renewals=[(job.id, token, {"step": 3}, 10)], now=at(t0, 30)
        )
        == []
    )
    recover = {"limit": 10, "backoff_base": 0, "backoff_cap": 0, "jitter": 0}
    assert await queries.lease_recover_expired(db, now=at(t0, 33), **recover) == []
    assert (await job_row(db, job.id))["lease_expires_at"] == at(t0, 34)
    [lost] = await queries.lease_recover_expired(db, now=at(t0, 34.5), **recover)
    assert (lost.job_id, lost.token, lost.state.value) == (job.id, token, "pending")


async def test_x05_heartbeats_stop_renewing_at_max_runtime(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Injected clock: renewals are capped at the deadline and refused after it, whatever the progress."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t")])
    t0 = await db_now(db)
    [claimed] = await queries.job_claim(
        db, queue="default", owner="w", limit=1, default_lease_seconds=10, default_runtime_seconds=25, now=t0
    )
    assert claimed.lease.deadline == at(t0, 25)
    token = claimed.lease.token
    expiries = []
    for step, when in enumerate((8, 16, 24), start=1):
        [ext] = await queries.lease_extend_many(
            db, owner="w", renewals=[(job.id, token, {"step": step}, 10)], now=at(t0, when)
        )
        expiries.append(ext.expires_at)
    assert expiries == [at(t0, 18), at(t0, 25), at(t0, 25)]
    assert (
        await queries.lease_extend_many(
            db, owner="w", renewals=[(job.id, token, {"step": 4}, 10)], now=at(t0, 25.5)
        )
        == []
    )
    [lost] = await queries.lease_recover_expired(
        db, limit=10, backoff_base=0, backoff_cap=0, jitter=0, now=at(t0, 25.5)
    )
    assert (lost.job_id, lost.token) == (job.id, token)
    assert (await job_row(db, job.id))["last_error_code"] == "LEASE_EXPIRED"


@pytest.mark.slow
@pytest.mark.parametrize("handler", ["async", "thread"])
async def test_x05_worker_renews_on_progress_until_max_runtime(
    db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any, handler: str
) -> None:
    """A worker renews a progressing job's 0.5 s lease past 2 leases, then stops it at max runtime."""
    lease, max_runtime = 0.5, 1.5
    run: dict[str, Any] = {}

    if handler == "async":

        @app.task(name="x5.progressing", max_attempts=1, max_runtime_seconds=max_runtime)
        async def progressing(ctx: tenure.JobContext) -> None:
            run["start"] = time.monotonic()
            try:
                for step in range(1000):
                    await asyncio.sleep(0.02)
                    ctx.progress(step)
            finally:
                run["end"] = time.monotonic()

    else:

        @app.task(name="x5.progressing", max_attempts=1, max_runtime_seconds=max_runtime)
        def progressing_in_a_thread(ctx: tenure.JobContext) -> None:
            run["start"] = time.monotonic()
            try:
                for step in range(1000):
                    time.sleep(0.02)
                    ctx.progress(step)  # raises LeaseLost once the deadline has stopped the job
            finally:
                run["end"] = time.monotonic()

    worker = await start_worker(app, lease_seconds=lease, poll_interval=0.1, recovery_interval=0.1)
    job = await app.enqueue("x5.progressing")

    async def dead() -> dict[str, Any] | None:
        row = await job_row(db, job.id)
        return row if row["state"] == "dead" else None

    final = await wait_until(dead, timeout=15, what="the job to stop at its max runtime")
    # A thread's MAX_RUNTIME can be written a moment before the thread itself has returned.
    await wait_for(lambda: "end" in run, timeout=5, what="the handler to return")
    ran_for = run["end"] - run["start"]
    print(f"\nX5 {handler}: progressing, ran {ran_for:.2f}s on a {lease}s lease, {max_runtime}s max runtime")
    assert ran_for >= 2 * lease, (
        f"progress should have renewed the lease, but the job stopped at {ran_for:.2f}s"
    )
    assert ran_for <= max_runtime + MARGIN, f"ran {ran_for:.2f}s past a {max_runtime}s max runtime"
    assert final["last_error_code"] in ("MAX_RUNTIME", "LEASE_EXPIRED"), final
    assert worker.stats.heartbeats_sent >= 2

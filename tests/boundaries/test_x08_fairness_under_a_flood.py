"""X8: a flood in one class does not starve another. Queue weights give a starved queue its configured
share of the worker's slots; within a queue, the claim's oldest-first share bounds how many jobs
can be claimed before a due job, whatever its priority (docs/ordering.md derives the bound), and
nothing is written to a job while it waits."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _harness import db_now, wait_until

import tenure
from tenure import JobSpec
from tenure.db.queries import Queries
from tenure.worker.oldest_share import OldestShare


async def pending(db: psycopg.AsyncConnection[Any]) -> int:
    row = await (await db.execute("SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'")).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
async def test_x08_a_flooded_queue_leaves_the_weighted_share_to_the_other(
    app: tenure.Tenure, start_worker: Any, db: psycopg.AsyncConnection[Any]
) -> None:
    """Weights flood=3, small=1 on 4 slots: while both queues have backlog, the small queue gets about
    a quarter of the completions, even though the flood was enqueued first and at higher priority."""
    finished: list[str] = []

    @app.task(name="x8.work")
    async def work(ctx: tenure.JobContext, lane: str) -> None:
        await asyncio.sleep(0.01)
        finished.append(lane)

    await app.client.enqueue_many(
        [JobSpec(task="x8.work", payload={"lane": "flood"}, queue="flood", priority=100) for _ in range(240)]
    )
    await app.client.enqueue_many(
        [JobSpec(task="x8.work", payload={"lane": "small"}, queue="small") for _ in range(40)]
    )
    worker = await start_worker(
        app,
        queues=["flood", "small"],
        queue_weights={"flood": 3, "small": 1},
        concurrency=4,
        poll_interval=0.05,
    )

    async def small_done() -> bool:
        return finished.count("small") == 40

    await wait_until(small_done, timeout=60, what="the small queue to drain")
    share = finished.count("small") / len(finished)
    assert finished.count("flood") < 240, "the flood must still have had backlog when the small queue drained"
    assert 0.18 <= share <= 0.35, f"small queue share {share:.2f}, configured 0.25"
    await start_worker.stop(worker, timeout=15)


def starvation_bound(every: int, ahead: int, workers: int) -> int:
    """The most jobs claimed from a queue before the claim that takes a due job with `ahead`
    claimable jobs older than it, by `workers` workers each taking one job in `every` from the
    oldest due ones: every * ahead + workers * (every - 1) (docs/ordering.md)."""
    return every * ahead + workers * (every - 1)


@pytest.mark.slow
async def test_x08_a_low_priority_job_runs_within_the_bound_while_a_flood_keeps_arriving(
    app: tenure.Tenure, start_worker: Any
) -> None:
    """One slot, priority-10 jobs arriving faster than they are done, one priority-0 job behind 20 of
    them: with oldest_every=5 it is claimed after at most 5 * 20 + 4 others, while the flood goes on."""
    order: list[str] = []
    low_ran = asyncio.Event()

    @app.task(name="x8.step")
    async def step(ctx: tenure.JobContext, lane: str) -> None:
        order.append(lane)
        if lane == "low":
            low_ran.set()
        await asyncio.sleep(0.002)

    def flood(n: int) -> list[JobSpec]:
        return [JobSpec(task="x8.step", payload={"lane": "flood"}, priority=10) for _ in range(n)]

    ahead = 20
    await app.client.enqueue_many(flood(ahead))  # the low job arrives behind a backlog...
    await app.client.enqueue_many([JobSpec(task="x8.step", payload={"lane": "low"}, priority=0)])
    await start_worker(app, concurrency=1, poll_interval=0.02, oldest_every=5)
    produced, limit = ahead, 5_000
    while not low_ran.is_set() and produced < limit:  # ...and more keeps coming, faster than it is done
        await app.client.enqueue_many(flood(20))
        produced += 20
        await asyncio.sleep(0.02)
    assert low_ran.is_set(), f"the low-priority job never ran during a flood of {produced} jobs"
    before = order.index("low")
    assert ahead <= before <= starvation_bound(5, ahead, 1), order
    assert order.count("flood") < produced, "the flood had drained: this proves nothing about the bound"


@pytest.mark.parametrize(("every", "workers", "batch"), [(5, 1, 1), (10, 3, 1), (4, 2, 7), (3, 4, 20)])
async def test_x08_the_bound_holds_for_any_fleet_batch_and_counter_alignment(
    db: psycopg.AsyncConnection[Any], queries: Queries, every: int, workers: int, batch: int
) -> None:
    """Workers whose counters start anywhere claim batches from a queue flooded at priority 10 faster
    than they claim (injected clock). A priority-0 job behind 30 older priority-5 jobs (which only
    the oldest-first share ever takes, so the bound is nearly tight) is claimed after at most
    starvation_bound() others; with the share off, priority alone never claims it."""
    ahead = 30

    async def run(oldest_every: int | None, budget: int) -> int | None:
        await db.execute("DELETE FROM tenure.jobs")
        t0 = await db_now(db)
        older = [
            JobSpec(task="t", priority=5, run_at=t0 - timedelta(seconds=ahead - i)) for i in range(ahead)
        ]
        await queries.job_insert_many(db, older, now=t0)
        [low] = await queries.job_insert_many(db, [JobSpec(task="t", priority=0)], now=t0)
        shares = [OldestShare(oldest_every) for _ in range(workers)]
        for w, share in enumerate(shares):  # 0 is the worst: a whole `every` before the first pick
            share.record("default", w % every)
        claimed, step = 0, 0
        while claimed < budget:
            step += 1
            now = t0 + timedelta(seconds=step)
            newcomers = [JobSpec(task="t", priority=10, run_at=now)] * (workers * batch)
            await queries.job_insert_many(db, newcomers, now=now)  # the flood outpaces the claims
            for w, share in enumerate(shares):
                jobs = await queries.job_claim(
                    db,
                    queue="default",
                    owner=f"w{w}",
                    limit=batch,
                    oldest=share.take("default", batch),
                    default_lease_seconds=600,
                    default_runtime_seconds=600,
                    now=now,
                )
                assert len(jobs) == batch, "the flood ran dry: this proves nothing"
                share.record("default", len(jobs))
                if low.id in {j.id for j in jobs}:
                    return claimed  # jobs claimed before the claim that took it
                claimed += len(jobs)
        return None

    bound = starvation_bound(every, ahead, workers)
    before = await run(every, bound + workers * batch)
    assert before is not None and before <= bound, (before, bound)
    assert await run(None, 2 * bound) is None, "without the share the low job must starve here"


async def test_x08_the_claim_takes_the_oldest_due_jobs_then_by_priority_in_one_statement(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """A claim with oldest=2 of 5 takes the two oldest due jobs whatever their priority, then the three
    best by priority, each once; jobs not yet due are in neither lane."""
    t0 = await db_now(db)
    old = await queries.job_insert_many(
        db, [JobSpec(task="t", priority=-5, run_at=t0 - timedelta(minutes=10 - i)) for i in range(3)], now=t0
    )
    high = await queries.job_insert_many(db, [JobSpec(task="t", priority=9) for _ in range(4)], now=t0)
    await queries.job_insert_many(db, [JobSpec(task="t", priority=99, delay=60)], now=t0)  # not yet due
    claimed = await queries.job_claim(
        db,
        queue="default",
        owner="w",
        limit=5,
        oldest=2,
        default_lease_seconds=30,
        default_runtime_seconds=60,
    )
    assert sorted(j.id for j in claimed) == sorted([old[0].id, old[1].id] + [j.id for j in high[:3]])


async def test_x08_waiting_jobs_are_never_rewritten_while_they_wait(
    app: tenure.Tenure, start_worker: Any, db: psycopg.AsyncConnection[Any]
) -> None:
    """Fairness costs no writes per waiting job: with a worker running, a backlog that has waited an
    hour keeps every row version (same xmin and ctid) and its priority."""

    @app.task(name="x8.busy", queue="busy")
    async def busy(ctx: tenure.JobContext) -> None: ...

    hour_ago = await db_now(db) - timedelta(hours=1)
    await app.client.enqueue_many([JobSpec(task="x8.wait", queue="waiting", run_at=hour_ago)] * 200)
    query = "SELECT id, xmin::text, ctid::text, priority FROM tenure.jobs WHERE queue = 'waiting' ORDER BY id"
    before = await (await db.execute(query)).fetchall()
    worker = await start_worker(app, queues=["busy"], poll_interval=0.02)
    await app.client.enqueue_many([JobSpec(task="x8.busy", queue="busy")] * 50)

    async def drained() -> bool:
        return worker.stats.succeeded == 50

    await wait_until(drained, timeout=30, what="the busy queue to drain")
    await asyncio.sleep(0.5)  # several passes of every background service
    assert await (await db.execute(query)).fetchall() == before

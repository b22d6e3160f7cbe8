"""X8: a flood in one class does not starve another. Queue weights give a starved queue its configured
share of the worker's slots; priority aging bounds how long a low-priority job can be passed by
higher-priority jobs that arrive after it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _harness import db_now, wait_until

import tenure
from tenure import JobSpec
from tenure.db.fairness_queries import FairnessQueries
from tenure.db.queries import Queries


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
        priority_aging_seconds=None,
    )

    async def small_done() -> bool:
        return finished.count("small") == 40

    await wait_until(small_done, timeout=60, what="the small queue to drain")
    share = finished.count("small") / len(finished)
    assert finished.count("flood") < 240, "the flood must still have had backlog when the small queue drained"
    assert 0.18 <= share <= 0.35, f"small queue share {share:.2f}, configured 0.25"
    await start_worker.stop(worker, timeout=15)


@pytest.mark.slow
async def test_x08_aging_runs_a_low_priority_job_while_a_high_priority_flood_keeps_arriving(
    app: tenure.Tenure, start_worker: Any
) -> None:
    """One slot, priority-10 jobs arriving faster than they are done, one priority-0 job: with one
    aging step per 50 ms the low job outranks the newcomers and runs while the flood is still going."""
    order: list[str] = []
    low_ran = asyncio.Event()

    @app.task(name="x8.step")
    async def step(ctx: tenure.JobContext, lane: str) -> None:
        order.append(lane)
        if lane == "low":
            low_ran.set()
        await asyncio.sleep(0.005)

    def flood(n: int) -> list[JobSpec]:
        return [JobSpec(task="x8.step", payload={"lane": "flood"}, priority=10) for _ in range(n)]

    await app.client.enqueue_many(flood(100))  # the low job arrives behind a backlog...
    await app.client.enqueue_many([JobSpec(task="x8.step", payload={"lane": "low"}, priority=0)])
    await start_worker(
        app, concurrency=1, poll_interval=0.02, priority_aging_seconds=0.05, priority_aging_max=1000
    )
    produced, limit = 100, 6_000
    while not low_ran.is_set() and produced < limit:  # ...and more keeps coming, faster than it is done
        await app.client.enqueue_many(flood(20))
        produced += 20
        await asyncio.sleep(0.05)
    assert low_ran.is_set(), f"the low-priority job never ran during a flood of {produced} jobs"
    assert order.index("low") >= 100, "the low job cannot pass the flood that was there before it"
    assert order.count("flood") < produced, "the flood had drained: this proves nothing about aging"


async def test_x08_aging_bounds_how_long_later_high_priority_jobs_pass_an_older_one(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Aging is one step per interval, capped: after 6.5 intervals a priority-0 job outranks
    priority-5 jobs that arrived 1.5 or more intervals after it, and is claimed before them;
    without aging it would come last."""
    t0 = await db_now(db)
    step = 10.0
    [low] = await queries.job_insert_many(db, [JobSpec(task="t", priority=0, run_at=t0)])
    floods = {
        k: [
            j.id
            for j in await queries.job_insert_many(
                db, [JobSpec(task="t", priority=5, run_at=t0 + timedelta(seconds=k * step))] * 3
            )
        ]
        for k in range(1, 7)
    }
    now = t0 + timedelta(seconds=6.5 * step)
    aged = await FairnessQueries("tenure").priority_age(db, step_seconds=step, max_boost=20, now=now)
    assert {r["id"]: r["priority"] for r in aged}[low.id] == 6
    assert await FairnessQueries("tenure").priority_age(db, step_seconds=step, max_boost=20, now=now) == []

    # The claim takes the 13 best: the 12 floods that arrived within 4 intervals after the low job
    # (priorities 10, 9, 8, 7), then the low job (6, and older than the k=5 floods, also at 6).
    claimed = await queries.job_claim(
        db,
        queue="default",
        owner="w",
        limit=13,
        default_lease_seconds=30,
        default_runtime_seconds=60,
        now=now,
    )
    assert {j.id for j in claimed} == {low.id} | {i for k in range(1, 5) for i in floods[k]}


async def test_x08_aging_is_capped_above_the_enqueued_priority(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """However long a job waits, aging lifts it at most max_boost steps above its enqueued priority."""
    t0 = await db_now(db)
    [job] = await queries.job_insert_many(db, [JobSpec(task="t", priority=-3, run_at=t0)])
    fairness = FairnessQueries("tenure")
    [row] = await fairness.priority_age(db, step_seconds=1, max_boost=4, now=t0 + timedelta(hours=1))
    assert (row["id"], row["priority"], row["priority_boost"]) == (job.id, 1, 4)
    assert await fairness.priority_age(db, step_seconds=1, max_boost=4, now=t0 + timedelta(days=9)) == []


async def test_x08_one_aging_pass_at_a_time_does_the_work(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """While one pass holds the aging lock, another returns at once without reading the backlog."""
    t0 = await db_now(db)
    await queries.job_insert_many(db, [JobSpec(task="t", run_at=t0)])
    fairness = FairnessQueries("tenure")
    later = t0 + timedelta(minutes=5)
    async with await psycopg.AsyncConnection.connect(dsn) as other:
        await other.execute("SELECT pg_advisory_xact_lock(hashtext('tenure.aging:tenure'))")
        assert await fairness.priority_age(db, step_seconds=60, max_boost=10, now=later) == []
        await other.rollback()
    [row] = await fairness.priority_age(db, step_seconds=60, max_boost=10, now=later)
    assert row["priority_boost"] == 5

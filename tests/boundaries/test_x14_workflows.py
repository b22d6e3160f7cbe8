"""X14: a workflow's steps are released inside their parents' fenced completions. A parent
SIGSTOPped past its lease releases nothing; two last parents completing at once release their
fan-in once, with both results; a cancel in the middle of a fan-out leaves no step started after
it and no fan-in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import job_events, wait_for_marker, wait_until

import tenure
from tenure import JobContext, Workflow
from tenure.db.queries import Queries

LEASE = 1.0


async def _step_jobs(db: psycopg.AsyncConnection[Any], workflow_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every job of each step (a step must never have more than one)."""
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    await cur.execute(
        "SELECT workflow_step, id, state::text AS state, lease_token, payload, result FROM tenure.jobs "
        "WHERE workflow_id = %s ORDER BY id",
        (workflow_id,),
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for row in await cur.fetchall():
        found.setdefault(row["workflow_step"], []).append(row)
    return found


@pytest.mark.crash
@pytest.mark.slow
async def test_x14_a_parent_paused_past_its_lease_releases_nothing(
    dsn: str, db: psycopg.AsyncConnection[Any], spawn_worker: Any, marker_dir: Path
) -> None:
    """SIGSTOP A inside the parent step past its lease; B reclaims and completes it, which releases
    the child once, with B's result; SIGCONT A: its late completion releases no second child."""
    app = tenure.Tenure()
    parent = app.registry.register(_never, name="boundary.workflow_parent", max_attempts=5)
    child = app.registry.register(_never, name="boundary.workflow_child", max_attempts=5)
    wf = Workflow("paused parent")
    first = wf.step(parent.bind(marker_dir=str(marker_dir)), name="parent")
    wf.step(child.bind(marker_dir=str(marker_dir)), after=first, input="parent", name="child")
    async with tenure.Client(dsn, registry=app.registry) as client:
        run = await client.enqueue_workflow(wf)

    worker_a = spawn_worker("worker-a", lease=LEASE)
    await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker_a,))
    worker_a.pause()
    worker_b = spawn_worker("worker-b", lease=LEASE)
    await wait_for_marker(marker_dir, "finished-2", timeout=20, procs=(worker_b,))
    child_job = run.jobs["child"]
    await wait_for_marker(marker_dir, f"child-{child_job}-1-of-2", timeout=20, procs=(worker_b,))

    (marker_dir / "release-1").touch()
    worker_a.resume()
    await wait_for_marker(marker_dir, "finished-1", timeout=20, procs=(worker_a,))

    async def a_settled() -> list[dict[str, Any]] | None:
        events = await job_events(db, run.jobs["parent"])
        return [e for e in events if e["token"] == 1 and e["event"] in ("fencing_lost", "lease_lost")] or None

    await wait_until(a_settled, timeout=15, what="A's attempt to end refused")
    jobs = await _step_jobs(db, run.id)
    assert [(j["state"], j["result"]) for j in jobs["parent"]] == [("succeeded", 2)]
    assert [(j["id"], j["payload"]["parent"]) for j in jobs["child"]] == [(child_job, 2)]
    children = sorted(p.name for p in await asyncio.to_thread(lambda: list(marker_dir.glob("child-*"))))
    assert children == [f"child-{child_job}-1-of-2"], "the child ran once, released by B's completion"


async def _never(ctx: JobContext, **_: Any) -> None:
    raise AssertionError("these tasks run in the worker processes only")


async def test_x14_the_last_two_parents_completing_at_once_release_the_fan_in_once(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """Two parents of one fan-in complete in two transactions at once, the second waiting on the
    first's lock on the fan-in's row, 20 times over: one fan-in job each time, with both results;
    then 20 more without the wait staged."""
    registry = tenure.TaskRegistry()
    part = registry.register(_never, name="race.part", queue="race")
    total = registry.register(_never, name="race.sum", queue="race")

    async def complete(conn: psycopg.AsyncConnection[Any], job: Any, result: int) -> None:
        lease = (job.id, job.lease.token)
        assert await queries.job_complete_many(conn, owner="w", leases=[lease], results={lease: result}) == {
            lease: "done"
        }

    for staged in (True, False):
        for _ in range(20):
            wf = Workflow("race")
            parts = wf.group([part.bind(), part.bind()], name="part")
            wf.step(total, after=parts, input="values", name="sum")
            async with tenure.Client(dsn, registry=registry) as client:
                run = await client.enqueue_workflow(wf)
            async with (
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as one,
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as two,
            ):
                claimed = await queries.job_claim(
                    one,
                    queue="race",
                    owner="w",
                    limit=2,
                    tasks=["race.part"],
                    default_lease_seconds=30,
                    default_runtime_seconds=60,
                )
                a, b = sorted(claimed, key=lambda j: j.id)
                if staged:
                    async with one.transaction():
                        await complete(one, a, 10)
                        second = asyncio.create_task(complete(two, b, 20))
                        await asyncio.sleep(0.05)
                        assert not second.done(), "the second completion waits on the fan-in's row"
                    await second
                else:
                    await asyncio.gather(complete(one, a, 10), complete(two, b, 20))
            jobs = await _step_jobs(db, run.id)
            assert [j["payload"] for j in jobs["sum"]] == [{"values": [10, 20]}], jobs


@pytest.mark.slow
async def test_x14_a_cancel_in_the_middle_of_a_fan_out_starts_nothing_after_it(
    dsn: str, db: psycopg.AsyncConnection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A fan-out of 50 slow steps with a fan-in, cancelled once some have succeeded: no step
    starts after the cancel commits, the running ones are revoked, every step ends succeeded or
    cancelled, the fan-in never runs, and the cancel never deadlocks with the completions (it
    locks step jobs before steps, as they do)."""
    app = tenure.Tenure(dsn)
    started: list[tuple[str, float]] = []
    ten_started = asyncio.Event()

    @app.task(name="fan.part", queue="fan")
    async def part(ctx: JobContext, n: int) -> int:
        started.append((f"part-{n}", time.monotonic()))
        if len(started) >= 10:
            ten_started.set()
        await asyncio.sleep(0.2)
        return n

    @app.task(name="fan.sum", queue="fan")
    async def total(ctx: JobContext, values: list[int]) -> int:
        started.append(("sum", time.monotonic()))
        return sum(values)

    wf = Workflow("cancelled fan-out")
    parts = wf.group([part.bind(n=n) for n in range(50)], name="part")
    wf.step(total.bind(), after=parts, input="values", name="sum")
    run = await app.enqueue_workflow(wf)
    worker = app.worker(tenure.WorkerOptions(concurrency=4, poll_interval=0.05, shutdown_grace=2.0))
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(ten_started.wait(), 30)
        done = await app.cancel_workflow(run.id, reason="wrong batch")
        cancelled_at = time.monotonic()
        assert done.outcome == "cancelled" and done.steps_cancelled == 1
        await asyncio.sleep(1.0)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)
        await app.close()
    late = [name for name, at in started if at > cancelled_at]
    assert late == [], f"steps started after the cancel: {late}"
    assert "sum" not in {name for name, _ in started}
    jobs = await _step_jobs(db, run.id)
    assert "sum" not in jobs, "the fan-in was never released"
    states = {name: [j["state"] for j in rows] for name, rows in jobs.items()}
    assert all(len(s) == 1 and s[0] in ("succeeded", "cancelled") for s in states.values()), states
    assert len(states) == 50, "every part released at enqueue ended succeeded or cancelled"
    assert "DeadlockDetected" not in caplog.text
    assert sum(s == ["cancelled"] for s in states.values()) >= 30

"""X15: a workflow's size never runs inside one completion. A fan-out's release, the steps after a
dead root and a large fan-in's input are bounded inside the statement that triggers them (64 steps)
and done by the workflow pass a chunk at a time; an input over its bound holds its own step, with
the reason, and fails nothing else; a step row locked elsewhere delays only its own completion; a
dead step whose job was purged is remade by a retry."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg
import pytest
from _harness import rows, wait_until
from psycopg.types.json import Jsonb

import tenure
from tenure import JobContext, Workflow
from tenure.db.queries import Queries
from tenure.model.jobs import ClaimedJob

OWNER = "x15"
INLINE_LIMIT = 64


def _app() -> tuple[tenure.Tenure, Any, Any]:
    app = tenure.Tenure()
    root = app.registry.register(_never, name="x15.root")
    child = app.registry.register(_never, name="x15.child")
    return app, root, child


async def _never(ctx: JobContext, **_: Any) -> None:
    raise AssertionError("these steps are moved by the test's own statements")


async def _claim(
    db: psycopg.AsyncConnection[Any], queries: Queries, task: str, limit: int = 1000
) -> list[ClaimedJob]:
    return await queries.job_claim(
        db,
        queue="default",
        owner=OWNER,
        limit=limit,
        default_lease_seconds=60,
        default_runtime_seconds=120,
        tasks=[task],
    )


async def _pass_until_idle(
    db: psycopg.AsyncConnection[Any], queries: Queries, *, chunk: int = 500
) -> Counter[str]:
    """Runs the workflow pass chunk by chunk until no work is left: how many chunks of each kind."""
    done: Counter[str] = Counter()
    while (work := await queries.workflow_work_run(db, chunk=chunk)) is not None:
        assert work.outcome != "busy"
        done[work.kind] += 1
    return done


async def _step_states(db: psycopg.AsyncConnection[Any], workflow_id: int) -> Counter[str]:
    found = await rows(db, "SELECT state FROM tenure.workflow_steps WHERE workflow_id = %s", (workflow_id,))
    return Counter(r["state"] for r in found)


async def _jobs_per_step(db: psycopg.AsyncConnection[Any], workflow_id: int) -> Counter[str]:
    found = await rows(db, "SELECT workflow_step FROM tenure.jobs WHERE workflow_id = %s", (workflow_id,))
    return Counter(r["workflow_step"] for r in found)


async def test_x15_a_large_fan_out_is_released_a_chunk_at_a_time(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """The root of a fan-out of 5,000: its completion makes at most 64 children jobs and leaves the
    rest to the pass, which releases every child exactly once, in chunks of 500."""
    app, root, child = _app()
    wf = Workflow("wide")
    first = wf.step(root, name="root")
    wf.group([child.bind(n=n) for n in range(5000)], after=first, name="child")
    async with tenure.Client(dsn, registry=app.registry) as client:
        run = await client.enqueue_workflow(wf)
    [claimed] = await _claim(db, queries, "x15.root")
    outcome = await queries.job_complete_many(db, owner=OWNER, leases=[(claimed.id, claimed.lease.token)])
    assert outcome == {(claimed.id, claimed.lease.token): "done"}
    released_inline = sum(1 for step in await _jobs_per_step(db, run.id) if step != "root")
    assert released_inline <= INLINE_LIMIT
    assert await rows(db, "SELECT kind FROM tenure.workflow_work") == [{"kind": "release"}]
    chunks = await _pass_until_idle(db, queries)
    assert chunks["release"] == 10  # (5,000 - 64) / 500 rounded up, and the chunk that finds none left
    per_step = await _jobs_per_step(db, run.id)
    assert len(per_step) == 5001 and set(per_step.values()) == {1}
    assert await _step_states(db, run.id) == Counter({"released": 5000, "succeeded": 1})


@pytest.mark.parametrize("on_dead", ["hold", "cancel"])
async def test_x15_a_dead_root_holds_what_follows_a_bounded_piece_at_a_time(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries, on_dead: str
) -> None:
    """A root with 2,000 children and a chain of 300 steps after one of them dies: the failure that
    killed it touches at most 64 steps; the pass holds (or cancels) all 2,300; a retry of the
    root lets every one of them wait again, also through the pass."""
    app, root, child = _app()
    wf = Workflow("deep and wide", on_dead=on_dead)  # type: ignore[arg-type]
    first = wf.step(root, name="root")
    children = wf.group([child.bind(n=n) for n in range(2000)], after=first, name="child")
    link = children[0]
    for n in range(300):
        link = wf.step(child.bind(n=-n), after=link, name=f"chain-{n:03}")
    async with tenure.Client(dsn, registry=app.registry) as client:
        run = await client.enqueue_workflow(wf)
        [claimed] = await _claim(db, queries, "x15.root")
        failed = await queries.job_fail(
            db,
            job_id=claimed.id,
            owner=OWNER,
            token=claimed.lease.token,
            error_code="BOOM",
            error="the root failed",
            retry_delay=None,
        )
        assert failed.state is not None and failed.state.value == "dead"
        follow = "held" if on_dead == "hold" else "cancelled"
        assert (await _step_states(db, run.id))[follow] <= INLINE_LIMIT
        await _pass_until_idle(db, queries)
        assert await _step_states(db, run.id) == Counter({follow: 2300, "dead": 1})
        assert await client.retry_workflow(run.id, reason="the root's input is fixed") == [claimed.id]
        await _pass_until_idle(db, queries)
        assert await _step_states(db, run.id) == Counter({"waiting": 2300, "released": 1})


async def test_x15_an_input_over_its_bound_holds_its_own_step_and_fails_nothing_else(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """40 parents of one fan-in complete with 1 MiB results each (40 MiB: over a step's 32 MiB
    input) in the batch that completes 20 plain jobs: the batch lands, the fan-in is held with
    INPUT_TOO_LARGE and the sizes, the step after it is held too, and a retry says why it cannot
    mend it."""
    app, root, child = _app()
    wf = Workflow("too much")
    parents = wf.group([root.bind(n=n) for n in range(40)], name="part")
    total = wf.step(child, after=parents, input="parts", name="total")
    wf.step(child, after=total, input="sum", name="report")
    async with tenure.Client(dsn, registry=app.registry) as client:
        run = await client.enqueue_workflow(wf)
        for n in range(20):
            await client.enqueue("x15.root", {"plain": n})
        claimed = await _claim(db, queries, "x15.root")
        assert len(claimed) == 60
        big = "x" * (1024 * 1024)
        results = {
            (job.id, job.lease.token): Jsonb(big) for job in claimed if job.payload.get("plain") is None
        }
        outcome = await queries.job_complete_many(
            db, owner=OWNER, leases=[(j.id, j.lease.token) for j in claimed], results=results
        )
        assert set(outcome.values()) == {"done"} and len(outcome) == 60
        steps = await rows(
            db,
            "SELECT name, state, held_reason FROM tenure.workflow_steps WHERE workflow_id = %s AND name IN "
            "('total', 'report') ORDER BY name",
            (run.id,),
        )
        assert [(s["name"], s["state"]) for s in steps] == [("report", "held"), ("total", "held")]
        reason = steps[1]["held_reason"]
        assert reason.startswith("INPUT_TOO_LARGE") and "33554432" in reason
        assert await _jobs_per_step(db, run.id) == Counter({f"part-{n}": 1 for n in range(1, 41)})
        shown = {s.name: s for s in await client.workflow_steps(run.id)}  # what show and the dashboard read
        assert shown["total"].shown_state == "held" and shown["total"].last_error_code == "INPUT_TOO_LARGE"
        assert shown["total"].last_error == reason
        with pytest.raises(tenure.ValidationError, match="step 'total' is held, INPUT_TOO_LARGE"):
            await client.retry_workflow(run.id, reason="try again")


async def test_x15_a_locked_step_row_delays_only_its_own_completion(
    dsn: str, db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """An open transaction holds a child's step row: a worker's 20 plain jobs completed beside the
    parent land meanwhile, each run once; the parent's completion lands once the lock is gone, and
    its child is released once and runs."""
    ran: Counter[str] = Counter()

    @app.task(name="x15.work")
    async def work(ctx: JobContext, key: str) -> str:
        ran[key] += 1
        return key

    @app.task(name="x15.after")
    async def after(ctx: JobContext, key: str, before: str) -> str:
        ran[key] += 1
        return before

    wf = Workflow("locked")
    parent = wf.step(work.bind(key="parent"), name="parent")
    wf.step(after.bind(key="child"), after=parent, input="before", name="child")
    async with tenure.Client(dsn, registry=app.registry) as client:
        run = await client.enqueue_workflow(wf)
        async with await psycopg.AsyncConnection.connect(dsn) as holder:
            await holder.execute(
                "SELECT 1 FROM tenure.workflow_steps WHERE workflow_id = %s AND name = 'child' FOR UPDATE",
                (run.id,),
            )
            for n in range(20):
                await client.enqueue("x15.work", {"key": f"plain-{n}"})
            await start_worker(app, lease_seconds=6, concurrency=30)

            async def plain_done() -> bool:
                found = await rows(
                    db,
                    "SELECT count(*) AS n FROM tenure.jobs WHERE task = 'x15.work' AND state = 'succeeded'",
                )
                return found[0]["n"] == 20 or None  # type: ignore[return-value]

            await wait_until(
                plain_done, timeout=20, what="the 20 plain jobs to succeed while the step is locked"
            )
            parent_row = await rows(
                db, "SELECT state::text AS state FROM tenure.jobs WHERE id = %s", (run.jobs["parent"],)
            )
            assert parent_row[0]["state"] == "running"
            await asyncio.sleep(0.5)
            await holder.rollback()

        async def child_done() -> bool:
            found = await rows(
                db, "SELECT state::text AS state FROM tenure.jobs WHERE id = %s", (run.jobs["child"],)
            )
            return (bool(found) and found[0]["state"] == "succeeded") or None  # type: ignore[return-value]

        await wait_until(child_done, timeout=20, what="the child to run once its step row is free")
    attempts = await rows(db, "SELECT max(attempt_count) AS most FROM tenure.jobs")
    assert attempts[0]["most"] == 1
    assert set(ran.values()) == {1} and len(ran) == 22


async def test_x15_a_retry_remakes_the_job_of_a_dead_step_that_was_purged(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """A step dies and its job is purged (as `tenure dead purge` does): a retry of the workflow makes
    its job again, with the input its release gave it, and the step it held waits again."""
    app, root, child = _app()
    wf = Workflow("purged")
    first = wf.step(root, name="first")
    second = wf.step(child, after=first, input="value", name="second")
    wf.step(child, after=second, name="third")
    async with tenure.Client(dsn, registry=app.registry) as client:
        run = await client.enqueue_workflow(wf)
        [one] = await _claim(db, queries, "x15.root")
        await queries.job_complete_many(
            db, owner=OWNER, leases=[(one.id, one.lease.token)], results={(one.id, one.lease.token): Jsonb(7)}
        )
        [two] = await _claim(db, queries, "x15.child")
        await queries.job_fail(
            db,
            job_id=two.id,
            owner=OWNER,
            token=two.lease.token,
            error_code="BOOM",
            error="no",
            retry_delay=None,
        )
        await db.execute("DELETE FROM tenure.jobs WHERE id = %s", (two.id,))
        assert await client.retry_workflow(run.id, reason="the bug is fixed") == [two.id]
        remade = await rows(
            db, "SELECT state::text AS state, payload FROM tenure.jobs WHERE id = %s", (two.id,)
        )
        assert remade == [{"state": "pending", "payload": {"value": 7}}]
        states = await rows(
            db,
            "SELECT name, state FROM tenure.workflow_steps WHERE workflow_id = %s ORDER BY name",
            (run.id,),
        )
        assert [(s["name"], s["state"]) for s in states] == [
            ("first", "succeeded"),
            ("second", "released"),
            ("third", "waiting"),
        ]

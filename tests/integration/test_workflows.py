"""Workflows through the library: chains pass results along, a fan-in receives every result of
its group, dead steps hold or cancel what follows and their reprocess resumes it, cancelling a
workflow cancels what is still to run, and enqueueing joins the caller's transaction."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from _inprocess import job_row, running
from psycopg import AsyncConnection

import tenure
from tenure import JobContext, Permanent, Tenure, Workflow, chain, fan_in


def _app(dsn: str) -> tuple[Tenure, dict[str, list[Any]]]:
    app = Tenure(dsn)
    seen: dict[str, list[Any]] = {}

    @app.task(name="wf.add", queue="wf")
    async def add(ctx: JobContext, x: int, y: int = 0) -> int:
        seen.setdefault("add", []).append((x, y))
        return x + y

    @app.task(name="wf.total", queue="wf")
    async def total(ctx: JobContext, values: list[int]) -> int:
        seen.setdefault("total", []).append(values)
        return sum(values)

    @app.task(name="wf.fail", queue="wf", max_attempts=1)
    async def fail(ctx: JobContext, x: int = 0) -> int:
        if not seen.get("fixed"):
            raise Permanent("not yet")
        seen.setdefault("fail", []).append(x)
        return 100

    return app, seen


async def _steps(app: Tenure, workflow_id: int) -> dict[str, str]:
    return {s.name: s.shown_state for s in await app.workflow_steps(workflow_id)}


async def _wait_step(
    db: AsyncConnection[Any], app: Tenure, workflow_id: int, step: str, state: str
) -> dict[str, Any]:
    """The step's job row once the step shows `state` (a step's job exists once released)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if (await _steps(app, workflow_id)).get(step) == state:
            return await job_row(db, app_job(await app.workflow_steps(workflow_id), step))
        await asyncio.sleep(0.05)
    raise AssertionError(f"step {step} never became {state}: {await _steps(app, workflow_id)}")


def app_job(steps: list[tenure.WorkflowStep], name: str) -> int:
    return next(s.job_id for s in steps if s.name == name)


async def test_a_chain_passes_each_result_to_the_next_step(dsn: str, db: AsyncConnection[Any]) -> None:
    """Three steps run in order, each given the previous result as its input argument."""
    app, seen = _app(dsn)
    add = app.registry.get("wf.add")
    assert add is not None
    wf = chain(add.bind(x=1, y=2), add.bind(y=10), add.bind(y=100), input="x")
    run = await app.enqueue_workflow(wf)
    assert list(run.jobs) == ["wf.add", "wf.add-2", "wf.add-3"]
    async with running(app, queues=["wf"]):
        last = await _wait_step(db, app, run.id, "wf.add-3", "succeeded")
    assert seen["add"] == [(1, 2), (3, 10), (13, 100)]
    assert last["result"] == 113
    summary = await app.get_workflow(run.id)
    assert summary is not None and summary.state == "succeeded" and summary.succeeded == 3


async def test_a_fan_in_runs_once_with_every_result_in_order(dsn: str, db: AsyncConnection[Any]) -> None:
    """Twenty parallel steps, then one step that receives their twenty results in the order the
    group was declared, and runs exactly once."""
    app, seen = _app(dsn)
    add, total = app.registry.get("wf.add"), app.registry.get("wf.total")
    assert add is not None and total is not None
    wf = fan_in([add.bind(x=i) for i in range(20)], total.bind(), input="values")
    run = await app.enqueue_workflow(wf)
    async with running(app, queues=["wf"], concurrency=8):
        row = await _wait_step(db, app, run.id, "wf.total", "succeeded")
    assert seen["total"] == [list(range(20))]
    assert row["result"] == sum(range(20))


async def test_a_dead_step_holds_what_follows_and_its_reprocess_resumes_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """With on_dead='hold', the steps after a dead step show held (transitively) while the
    others finish; retrying the workflow reprocesses the dead step, and the held steps run."""
    app, seen = _app(dsn)
    add, fail = app.registry.get("wf.add"), app.registry.get("wf.fail")
    assert add is not None and fail is not None
    wf = Workflow("held")
    root = wf.step(add.bind(x=1))
    broken = wf.step(fail.bind(), after=root, name="broken")
    wf.step(add.bind(x=5), after=root, name="side")
    after = wf.step(add.bind(), after=broken, input="x", name="after")
    wf.step(add.bind(), after=after, input="x", name="last")
    run = await app.enqueue_workflow(wf)
    async with running(app, queues=["wf"]):
        await _wait_step(db, app, run.id, "broken", "dead")
        await _wait_step(db, app, run.id, "side", "succeeded")
        assert await _steps(app, run.id) == {
            "wf.add": "succeeded",
            "broken": "dead",
            "side": "succeeded",
            "after": "held",
            "last": "held",
        }
        summary = await app.get_workflow(run.id)
        assert summary is not None and summary.state == "failed"
        seen["fixed"] = [True]
        assert await app.retry_workflow(run.id, reason="fixed the bug") == [run.jobs["broken"]]
        await _wait_step(db, app, run.id, "last", "succeeded")
    assert seen["add"][-2:] == [(100, 0), (100, 0)]
    summary = await app.get_workflow(run.id)
    assert summary is not None and summary.state == "succeeded"


async def test_a_dead_step_cancels_what_follows_when_the_workflow_says_so(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """With on_dead='cancel', every step after the dead one is cancelled, transitively."""
    app, _ = _app(dsn)
    add, fail = app.registry.get("wf.add"), app.registry.get("wf.fail")
    assert add is not None and fail is not None
    wf = chain(fail.bind(), add.bind(), add.bind(), input="x", on_dead="cancel")
    run = await app.enqueue_workflow(wf)
    async with running(app, queues=["wf"]):
        await _wait_step(db, app, run.id, "wf.fail", "dead")
    assert await _steps(app, run.id) == {"wf.fail": "dead", "wf.add": "cancelled", "wf.add-2": "cancelled"}


async def test_cancelling_a_workflow_cancels_waiting_steps_and_queued_jobs(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Without a worker the root steps are queued jobs and the rest wait: a cancel takes all of
    them, records who and why, and a second cancel says it was already done."""
    app, _ = _app(dsn)
    add, total = app.registry.get("wf.add"), app.registry.get("wf.total")
    assert add is not None and total is not None
    run = await app.enqueue_workflow(fan_in([add.bind(x=i) for i in range(3)], total.bind(), input="values"))
    done = await app.cancel_workflow(run.id, reason="wrong input", actor="ops")
    assert (done.outcome, done.steps_cancelled) == ("cancelled", 1)
    assert sorted(done.jobs_cancelled) == sorted(run.jobs[n] for n in ("wf.add", "wf.add-2", "wf.add-3"))
    assert set((await _steps(app, run.id)).values()) == {"cancelled"}
    summary = await app.get_workflow(run.id)
    assert summary is not None and (summary.state, summary.cancelled_by, summary.cancel_reason) == (
        "cancelled",
        "ops",
        "wrong input",
    )
    again = await app.cancel_workflow(run.id, reason="again")
    assert again.outcome == "already" and again.jobs_cancelled == []
    with pytest.raises(tenure.ValidationError, match="cancelled workflow stays cancelled"):
        await app.retry_workflow(run.id, reason="no")
    await app.close()


async def test_a_finished_workflow_cannot_be_cancelled_and_stays_as_it_is(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Once every step has succeeded, a cancel is refused naming what the workflow ran to, and
    the workflow stays succeeded and uncancelled."""
    app, _ = _app(dsn)
    add = app.registry.get("wf.add")
    assert add is not None
    run = await app.enqueue_workflow(chain(add.bind(x=1), add.bind(), input="x"))
    async with running(app, queues=["wf"]):
        await _wait_step(db, app, run.id, "wf.add-2", "succeeded")
    app, _ = _app(dsn)
    with pytest.raises(tenure.ValidationError, match=r"has finished \(2/2 succeeded\).*nothing was changed"):
        await app.cancel_workflow(run.id, reason="too late")
    summary = await app.get_workflow(run.id)
    assert summary is not None and (summary.state, summary.cancelled_at) == ("succeeded", None)
    await app.close()


async def test_a_workflow_enqueued_in_a_rolled_back_transaction_leaves_nothing(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Enqueued with conn=, the workflow, its steps and its root jobs exist only if the
    caller's transaction commits."""
    app, _ = _app(dsn)
    add = app.registry.get("wf.add")
    assert add is not None
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction(force_rollback=True):
        run = await app.enqueue_workflow(chain(add.bind(x=1), add.bind(), input="x"), conn=conn)
        cur = await conn.execute("SELECT count(*) FROM tenure.jobs WHERE workflow_id = %s", (run.id,))
        assert (await cur.fetchone()) == (1,)
    counts = await db.execute(
        "SELECT (SELECT count(*) FROM tenure.workflows), (SELECT count(*) FROM tenure.workflow_steps),"
        " (SELECT count(*) FROM tenure.jobs)"
    )
    assert await counts.fetchone() == (0, 0, 0)
    await app.close()


async def test_a_bad_step_is_refused_before_anything_is_written(dsn: str, db: AsyncConnection[Any]) -> None:
    """A step whose arguments do not fit its handler, or whose input argument the handler lacks,
    is refused with the step named, and nothing is written."""
    app, _ = _app(dsn)
    add, total = app.registry.get("wf.add"), app.registry.get("wf.total")
    assert add is not None and total is not None
    with pytest.raises(tenure.ValidationError, match=r"cannot bind task 'wf\.add'"):
        add.bind(z=1)
    wf = Workflow("bad")
    first = wf.step(add.bind(x=1))
    wf.step(total.bind(), after=first, input="numbers", name="sum")
    with pytest.raises(
        tenure.ValidationError, match=r"step 'sum' of workflow 'bad': input='numbers' names no argument"
    ):
        await app.enqueue_workflow(wf)
    other = Workflow("other")
    with pytest.raises(tenure.ValidationError, match="steps of this workflow"):
        other.step(add.bind(x=1), after=first)
    with pytest.raises(tenure.ValidationError, match="no steps"):
        await app.enqueue_workflow(Workflow("empty"))
    cur = await db.execute("SELECT count(*) FROM tenure.workflows")
    assert await cur.fetchone() == (0,)
    await app.close()


async def test_the_sql_way_in_refuses_a_cycle_and_a_repeated_name(db: AsyncConnection[Any]) -> None:
    """enqueue_workflow() itself refuses a step that depends on a later one (which is how a cycle
    would have to be written) and two steps of one name, naming them."""
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="step 'b' depends on 'c'"):
        await db.execute(
            "SELECT * FROM tenure.enqueue_workflow('w', %s::jsonb)",
            (
                '[{"name":"a","task":"t"},{"name":"b","task":"t","after":["c"]},{"name":"c","task":"t","after":["b"]}]',
            ),
        )
    await db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="two steps of the workflow are named 'a'"):
        await db.execute(
            "SELECT * FROM tenure.enqueue_workflow('w', %s::jsonb)",
            ('[{"name":"a","task":"t"},{"name":"a","task":"t"}]',),
        )


async def test_pausing_a_queue_pauses_the_steps_in_it(dsn: str, db: AsyncConnection[Any]) -> None:
    """A step released into a paused queue waits there like any job, and runs once the queue is
    resumed; the workflow's other queue goes on meanwhile."""
    app, seen = _app(dsn)
    add = app.registry.get("wf.add")
    assert add is not None
    wf = Workflow("paused")
    first = wf.step(add.bind(x=1), name="first")
    wf.step(add.bind(), after=first, input="x", name="second", queue="wf-later")
    run = await app.enqueue_workflow(wf)
    await app.pause_queue("wf-later", reason="maintenance", allow_unknown=True)
    async with running(app, queues=["wf", "wf-later"]):
        await _wait_step(db, app, run.id, "first", "succeeded")
        await asyncio.sleep(0.5)
        assert (await _steps(app, run.id))["second"] == "pending"
        await app.resume_queue("wf-later")
        await _wait_step(db, app, run.id, "second", "succeeded")
    assert seen["add"] == [(1, 0), (1, 0)]


async def test_a_caller_waits_for_a_steps_result_before_the_step_exists(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A step's job id is known at enqueue: app.result on it waits while the step waits for the
    steps before it, and returns its result once it ran; a step cancelled before it ran fails
    the wait with JobFailed instead of saying there is no such job."""
    app, _ = _app(dsn)
    add = app.registry.get("wf.add")
    assert add is not None
    run = await app.enqueue_workflow(chain(add.bind(x=1), add.bind(y=2), input="x"))
    async with running(app, queues=["wf"]):
        assert await app.result(run.jobs["wf.add-2"], timeout=15, poll=0.05) == 3
    held = await app.enqueue_workflow(chain(add.bind(x=1), add.bind(y=2), input="x"))
    await app.cancel_workflow(held.id, reason="not today")
    with pytest.raises(tenure.JobFailed, match="cancelled before it ran"):
        await app.result(held.jobs["wf.add-2"], timeout=5, poll=0.05)
    await app.close()

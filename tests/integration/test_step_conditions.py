"""Workflow steps that wait for the world: a step's condition (a signal, a time) runs, skips or
cancels it once its dependencies have succeeded, holding no slot meanwhile; a signal sent before
the step's release is kept for it; a signal racing the deadline has one outcome; a condition one
wait cannot keep is refused before anything is written."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _inprocess import events, job_row, running
from psycopg import AsyncConnection

from tenure import Elapsed, JobContext, Signalled, Tenure, ValidationError, WaitResult, Workflow
from tenure.lab.passes import worker_passes


class Orders:
    """reserve -> charge (its condition decides) -> ship, each recording what it received."""

    def __init__(self, dsn: str) -> None:
        self.app = app = Tenure(dsn)
        self.seen: dict[str, list[Any]] = {}
        seen = self.seen

        @app.task(name="c.reserve", queue="c")
        async def reserve(ctx: JobContext, order: int) -> int:
            seen.setdefault("reserve", []).append(order)
            return order * 10

        @app.task(name="c.charge", queue="c")
        async def charge(ctx: JobContext, order: int, amount: int) -> dict[str, Any]:
            got: WaitResult | None = await ctx.step_condition()
            seen.setdefault("charge", []).append(
                (amount, None if got is None else (got.outcome, got.payload))
            )
            return {"charged": amount}

        @app.task(name="c.ship", queue="c")
        async def ship(ctx: JobContext, order: int, charged: Any) -> str:
            seen.setdefault("ship", []).append(charged)
            return "shipped"

        self.reserve, self.charge, self.ship = reserve, charge, ship

    def flow(self, order: int, **condition: Any) -> Workflow:
        wf = Workflow(f"order {order}")
        reserved = wf.step(self.reserve.bind(order=order), name="reserve")
        charged = wf.step(
            self.charge.bind(order=order), after=reserved, input="amount", name="charge", **condition
        )
        wf.step(self.ship.bind(order=order), after=charged, input="charged", name="ship")
        return wf

    async def states(self, workflow_id: int) -> dict[str, str]:
        return {s.name: s.shown_state for s in await self.app.workflow_steps(workflow_id)}

    async def released_to_wait(self, workflow_id: int, step: str) -> None:
        """Until `step` is released and waits on its condition (before its release it shows
        'waiting' too: for its dependencies)."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            found = {s.name: s for s in await self.app.workflow_steps(workflow_id)}[step]
            if found.state == "released" and found.condition_state == "waiting":
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"step {step} never waited on its condition: {await self.states(workflow_id)}")

    async def until(self, workflow_id: int, **wanted: str) -> dict[str, str]:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            states = await self.states(workflow_id)
            if all(states.get(k) == v for k, v in wanted.items()):
                return states
            await asyncio.sleep(0.05)
        raise AssertionError(f"steps never reached {wanted}: {await self.states(workflow_id)}")


async def db_now(db: AsyncConnection[Any]) -> Any:
    cur = await db.execute("SELECT statement_timestamp()")
    row = await cur.fetchone()
    assert row is not None
    return row[0]


async def condition_wait(db: AsyncConnection[Any], job_id: int) -> tuple[Any, ...] | None:
    cur = await db.execute(
        "SELECT key, state, deadline IS NOT NULL, on_signal, on_deadline FROM tenure.job_waits "
        "WHERE job_id = %s AND name = '@step'",
        (job_id,),
    )
    return await cur.fetchone()


async def test_a_step_waits_for_its_signal_after_its_dependencies_and_its_handler_reads_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Released by its parent, the step's job waits (no lease, no attempt) until a signal to its
    key; then it runs with its parent's result and the signal's payload, and the step after it runs."""
    orders = Orders(dsn)
    made = await orders.app.enqueue_workflow(orders.flow(7, wait_for=Signalled("approve:7")))
    async with running(orders.app):
        await orders.released_to_wait(made.id, "charge")
        row = await job_row(db, made.jobs["charge"])
        assert (row["attempt_count"], row["lease_owner"]) == (0, None)
        assert await condition_wait(db, made.jobs["charge"]) == (
            "approve:7",
            "waiting",
            False,
            "resume",
            "resume",
        )
        assert "charge" not in orders.seen
        sent = await orders.app.signal("approve:7", {"by": "ana"})
        assert (sent.outcome, sent.job_id) == ("delivered", made.jobs["charge"])
        await orders.until(made.id, charge="succeeded", ship="succeeded")
    assert orders.seen["charge"] == [(70, ("signalled", {"by": "ana"}))]
    assert orders.seen["ship"] == [{"charged": 70}]
    assert [e[0] for e in await events(db, made.jobs["charge"])] == ["wait", "signalled"]


async def test_a_signal_sent_before_the_step_is_released_is_kept_for_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The approval arrives while the parent still runs: kept in the mailbox, it is delivered as the
    parent's completion releases the step, which runs at once."""
    orders = Orders(dsn)
    made = await orders.app.enqueue_workflow(orders.flow(8, wait_for=Signalled("approve:8")))
    assert (await orders.app.signal("approve:8", "early")).outcome == "kept"
    async with running(orders.app):
        await orders.until(made.id, ship="succeeded")
    assert orders.seen["charge"] == [(80, ("signalled", "early"))]


async def test_a_step_with_no_signal_by_its_deadline_is_cancelled_with_the_steps_after_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """cancel_if=Elapsed: the deadline pass cancels the step (its job says why) and the steps after
    it; a signal to its key sent afterwards is kept for someone else."""
    orders = Orders(dsn)
    made = await orders.app.enqueue_workflow(
        orders.flow(9, wait_for=Signalled("approve:9"), cancel_if=Elapsed(timedelta(days=3)))
    )
    async with running(orders.app):
        await orders.released_to_wait(made.id, "charge")
    later = await db_now(db) + timedelta(days=3, minutes=1)
    async with worker_passes(dsn, "tenure", name="test-conditions") as passes:
        assert (await passes.promoter.run_once(now=later - timedelta(days=1))).waits_timed_out == 0
        assert (await passes.promoter.run_once(now=later)).waits_timed_out == 1
    assert await orders.states(made.id) == {
        "reserve": "succeeded",
        "charge": "cancelled",
        "ship": "cancelled",
    }
    row = await job_row(db, made.jobs["charge"])
    assert (row["state"], row["last_error_code"], row["attempt_count"]) == (
        "cancelled",
        "CONDITION_CANCELLED",
        0,
    )
    assert "deadline" in row["last_error"]
    assert await condition_wait(db, made.jobs["charge"]) == (
        "approve:9",
        "timed_out",
        True,
        "resume",
        "cancel",
    )
    assert (await orders.app.signal("approve:9", "too late")).outcome == "kept"
    assert "charge" not in orders.seen and "ship" not in orders.seen
    summary = await orders.app.get_workflow(made.id)
    assert summary is not None and summary.state == "failed"


async def test_a_signal_that_skips_a_step_lets_the_steps_after_it_run_without_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """skip_if=Signalled with wait_for=Elapsed: the signal skips the step (succeeded, no result,
    its handler never ran) and the step after it receives None as its input."""
    orders = Orders(dsn)
    made = await orders.app.enqueue_workflow(
        orders.flow(10, wait_for=Elapsed(timedelta(hours=1)), skip_if=Signalled("free:10"))
    )
    async with running(orders.app):
        await orders.released_to_wait(made.id, "charge")
        assert (await orders.app.signal("free:10")).outcome == "delivered"
        await orders.until(made.id, charge="succeeded", ship="succeeded")
    assert "charge" not in orders.seen
    assert orders.seen["ship"] == [None]
    row = await job_row(db, made.jobs["charge"])
    assert (row["result"], row["attempt_count"], row["last_error"]) == (None, 0, None)
    history = await events(db, made.jobs["charge"])
    assert [e[0] for e in history] == ["wait", "signalled"]


async def test_a_kept_signal_that_skips_a_step_is_matched_by_the_sweep_after_its_release(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A signal that would skip the step, sent before its release, is not delivered inside the
    parent's completion (a chain of skips would all run there) but by the recovery pass's sweep."""
    orders = Orders(dsn)
    made = await orders.app.enqueue_workflow(
        orders.flow(11, wait_for=Elapsed(timedelta(hours=1)), skip_if=Signalled("free:11"))
    )
    assert (await orders.app.signal("free:11")).outcome == "kept"
    async with running(orders.app, recovery_interval=0.2):
        await orders.until(made.id, charge="succeeded", ship="succeeded")
    assert "charge" not in orders.seen and orders.seen["ship"] == [None]
    assert await condition_wait(db, made.jobs["charge"]) == ("free:11", "signalled", True, "skip", "resume")


async def test_a_root_step_sleeps_durably_and_then_runs(dsn: str, db: AsyncConnection[Any]) -> None:
    """A step without dependencies and wait_for=Elapsed is enqueued waiting; the deadline pass at
    its deadline makes it pending, and it runs with its condition timed out."""
    orders = Orders(dsn)
    wf = Workflow("later")
    wf.step(orders.reserve.bind(order=3), name="reserve", wait_for=Elapsed(timedelta(hours=24)))
    made = await orders.app.enqueue_workflow(wf)
    row = await job_row(db, made.jobs["reserve"])
    assert row["state"] == "waiting"
    async with worker_passes(dsn, "tenure", name="test-conditions") as passes:
        assert (
            await passes.promoter.run_once(now=await db_now(db) + timedelta(hours=25))
        ).waits_timed_out == 1
    async with running(orders.app):
        await orders.until(made.id, reserve="succeeded")
    assert orders.seen["reserve"] == [3]


async def test_a_signal_racing_the_deadline_has_exactly_one_outcome(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Twenty steps whose deadline cancels them, each signalled as the deadline pass runs: each is
    either run by its signal (the signal is its) or cancelled (the signal is kept for another),
    never both. A signal and a deadline that each found the other's rows locked (SKIP LOCKED: both
    pass over) are matched by the passes that follow, as a worker's next passes would."""
    orders = Orders(dsn)
    flows = []
    for order in range(100, 120):
        flows.append(
            await orders.app.enqueue_workflow(
                orders.flow(order, wait_for=Signalled(f"approve:{order}"), cancel_if=Elapsed(60))
            )
        )
    async with running(orders.app):
        for made in flows:
            await orders.released_to_wait(made.id, "charge")
    past = await db_now(db) + timedelta(minutes=5)

    async def send(order: int) -> str:
        return (await orders.app.signal(f"approve:{order}", order)).outcome

    async with worker_passes(dsn, "tenure", name="test-race") as passes:
        results = await asyncio.gather(
            passes.promoter.run_once(now=past), *(send(o) for o in range(100, 120))
        )
        await passes.recovery.run_once()  # its sweep matches a send that passed a locked wait
        await passes.promoter.run_once(now=past)
    assert len(results) == 21
    for made in flows:
        job_id = made.jobs["charge"]
        row = await job_row(db, job_id)
        wait = await condition_wait(db, job_id)
        cur = await db.execute("SELECT count(*) FROM tenure.signals WHERE job_id = %s", (job_id,))
        delivered = await cur.fetchone()
        assert wait is not None and delivered is not None
        assert (row["state"], wait[1], delivered[0]) in {
            ("pending", "signalled", 1),
            ("cancelled", "timed_out", 0),
        }, (row["state"], wait, delivered)
    cur = await db.execute("SELECT count(*) FROM tenure.signals WHERE job_id IS NULL")
    kept = await cur.fetchone()
    timed_out = [made for made in flows if (await job_row(db, made.jobs["charge"]))["state"] == "cancelled"]
    assert kept == (len(timed_out),)


@pytest.mark.parametrize(
    ("condition", "problem"),
    [
        ({"wait_for": [Signalled("a"), Signalled("b")]}, "one signal key"),
        ({"wait_for": Elapsed(60), "cancel_if": Elapsed(120)}, "one deadline"),
        ({"cancel_if": Elapsed(60)}, "never lets it run"),
        ({"wait_for": "approve:1"}, r"takes Signalled\(key\)"),
    ],
)
async def test_a_condition_one_wait_cannot_keep_is_refused_before_anything_is_written(
    dsn: str, db: AsyncConnection[Any], condition: dict[str, Any], problem: str
) -> None:
    """Two keys, two deadlines, nothing that runs the step, a bare string: a clear error as the
    step is declared."""
    orders = Orders(dsn)
    with pytest.raises(ValidationError, match=problem):
        orders.flow(1, **condition)
    with pytest.raises(ValidationError, match="more than 0"):
        Elapsed(0)
    cur = await db.execute("SELECT count(*) FROM tenure.workflows")
    assert await cur.fetchone() == (0,)


async def test_enqueue_workflow_in_sql_checks_a_steps_condition(dsn: str, db: AsyncConnection[Any]) -> None:
    """Any language enqueues a workflow through enqueue_workflow(): a condition that never runs the
    step, or of unknown fields, is refused naming the step, and nothing is written."""
    bad = [
        ('{"seconds": 60, "on_deadline": "cancel"}', "never lets it run"),
        ('{"key": "k", "when": 1}', "a condition is an object of key"),
        ('{"seconds": -1}', "more than 0 seconds"),
        ('{"key": "k", "on_signal": "explode"}', "resume"),
    ]
    for condition, problem in bad:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=problem):
            await db.execute(
                "SELECT * FROM tenure.enqueue_workflow('w', jsonb_build_array(jsonb_build_object("
                "'name', 'only', 'task', 'c.reserve', 'condition', %s::jsonb)))",
                (condition,),
            )
        await db.rollback()
    cur = await db.execute(
        "SELECT job_id FROM tenure.enqueue_workflow('w', jsonb_build_array(jsonb_build_object("
        "'name', 'only', 'task', 'c.reserve', 'condition', '{\"key\": \"go\"}'::jsonb)))"
    )
    row = await cur.fetchone()
    assert row is not None
    assert await condition_wait(db, row[0]) == ("go", "waiting", False, "resume", "resume")
    cur = await db.execute("SELECT count(*) FROM tenure.workflows")
    assert await cur.fetchone() == (1,)


async def test_tenure_testing_drives_step_conditions_without_a_worker(dsn: str) -> None:
    """Inline runs a workflow up to its waiting step; a signal and run_workflow finish it; in a
    second workflow pass_time reaches the deadline that cancels the step, without sleeping."""
    from tenure.testing import Inline

    orders = Orders(dsn)
    async with Inline(orders.app) as t:
        approved = await orders.app.enqueue_workflow(
            orders.flow(20, wait_for=Signalled("approve:20"), cancel_if=Elapsed(timedelta(days=3)))
        )
        assert [r.job.id for r in await t.run_workflow(approved.id)] == [approved.jobs["reserve"]]
        await orders.app.signal("approve:20", "yes")
        await t.run_workflow(approved.id)
        assert await orders.states(approved.id) == {
            "reserve": "succeeded",
            "charge": "succeeded",
            "ship": "succeeded",
        }
        lapsed = await orders.app.enqueue_workflow(
            orders.flow(21, wait_for=Signalled("approve:21"), cancel_if=Elapsed(timedelta(days=3)))
        )
        await t.run_workflow(lapsed.id)
        assert await t.pass_time(timedelta(days=2)) == 0
        assert await t.pass_time(timedelta(days=3, minutes=1)) == 1
        await t.run_workflow(lapsed.id)
        assert (await orders.states(lapsed.id))["ship"] == "cancelled"
    assert orders.seen["charge"] == [(200, ("signalled", "yes"))]

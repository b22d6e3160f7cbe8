"""tenure.testing, as an application's tests use it: assertions on what was enqueued, a job run
inline through the worker's own claim, executor and fenced outcome, a queue drained, and a
workflow driven step by step, all without a worker, async and thread handlers alike."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import tenure
from tenure import JobContext, Permanent, Tenure, chain
from tenure.testing import Inline


def _app(dsn: str) -> Tenure:
    app = Tenure(dsn)

    @app.task(name="t.receipt", queue="mail")
    async def receipt(ctx: JobContext, order_id: int) -> str:
        return f"sent {order_id}"

    @app.task(name="t.ledger", queue="bank")
    def ledger(ctx: JobContext, amount: int) -> int:  # a thread handler, writing in ctx.atomic
        def write(tx: tenure.SyncTransaction) -> None:
            tx.execute("INSERT INTO public.ledger VALUES (%s, %s)", (ctx.job_id, amount))

        ctx.atomic_sync(write)
        return amount

    @app.task(name="t.broken", queue="mail", max_attempts=1)
    async def broken(ctx: JobContext) -> None:
        raise Permanent("the template is missing", code="NO_TEMPLATE")

    @app.task(name="t.order", queue="shop")
    async def order(ctx: JobContext, order_id: int) -> None:
        await receipt.enqueue(order_id=order_id)

    @app.task(name="t.double", queue="shop")
    def double(ctx: JobContext, n: int) -> int:
        return 2 * n

    return app


async def test_assertions_name_what_was_enqueued(dsn: str) -> None:
    """assert_enqueued finds a job by task and payload fields and, when none matches, lists what
    the task has waiting; refute_enqueued names the jobs it did not expect."""
    app = _app(dsn)
    receipt = app.registry.get("t.receipt")
    assert receipt is not None
    async with Inline(app) as t:
        await receipt.enqueue(order_id=8)
        [job] = await t.assert_enqueued(receipt, order_id=8)
        assert job.payload == {"order_id": 8}
        await t.refute_enqueued(receipt, order_id=9)
        with pytest.raises(
            AssertionError,
            match=r'(?s)expected a job of t.receipt with args \{"order_id": 9\} scheduled or pending, found 0; '
            r'the task\'s jobs:\n  job \d+: t.receipt pending on queue "mail", priority 0, runs at .*, '
            r'args \{"order_id": 8\}',
        ):
            await t.assert_enqueued(receipt, order_id=9)
        with pytest.raises(AssertionError, match=rf'found 1:\n  job {job.id}: .*args \{{"order_id": 8\}}'):
            await t.refute_enqueued(receipt, order_id=8)
        await t.assert_enqueued("t.receipt", count=1)


async def test_run_job_runs_async_and_thread_handlers_through_the_fence(dsn: str) -> None:
    """An async handler's result and a thread handler's ctx.atomic write and result are stored
    as a worker stores them, under a real lease; the job is then no longer waiting."""
    app = _app(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (job_id bigint, amount int)")
    receipt, ledger = app.registry.get("t.receipt"), app.registry.get("t.ledger")
    assert receipt is not None and ledger is not None
    async with Inline(app) as t:
        job = await receipt.enqueue(order_id=7)
        ran = await t.run_job(job.id)
        assert (ran.state, ran.result, ran.job.lease_token) == ("succeeded", "sent 7", 1)
        ran = await t.perform(ledger, amount=30)
        assert (ran.state, ran.result) == ("succeeded", 30)
        await t.refute_enqueued(receipt)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT job_id, amount FROM public.ledger").fetchall() == [(ran.job.id, 30)]


async def test_a_failing_job_ends_as_its_policy_says_and_a_finished_one_cannot_run_again(dsn: str) -> None:
    """A Permanent failure leaves the job dead with its code; running it again is refused with
    the reason; so is an unknown job."""
    app = _app(dsn)
    broken = app.registry.get("t.broken")
    assert broken is not None
    async with Inline(app) as t:
        ran = await t.perform(broken)
        assert (
            ran.state == "dead"
            and ran.error == "NO_TEMPLATE: tenure.model.errors.Permanent: the template is missing"
        )
        with pytest.raises(tenure.ValidationError, match="is dead, not pending"):
            await t.run_job(ran.job.id)
        with pytest.raises(tenure.ValidationError, match="there is no job 999999"):
            await t.run_job(999999)


async def test_drain_runs_the_jobs_that_jobs_enqueue(dsn: str) -> None:
    """Draining every queue runs an order's job and the receipt job it enqueued."""
    app = _app(dsn)
    order = app.registry.get("t.order")
    assert order is not None
    async with Inline(app) as t:
        await order.enqueue(order_id=5)
        runs = await t.drain()
        assert [(r.job.task, r.state) for r in runs] == [("t.order", "succeeded"), ("t.receipt", "succeeded")]
        assert await t.drain() == []


async def test_a_workflow_is_driven_one_step_at_a_time(dsn: str) -> None:
    """A chain of three thread-handler steps: each run_workflow(steps=1) runs one step, whose
    completion releases the next with its result; at the end nothing is left to run."""
    app = _app(dsn)
    double = app.registry.get("t.double")
    assert double is not None
    async with Inline(app) as t:
        run = await app.enqueue_workflow(chain(double.bind(n=1), double, double, input="n"))
        seen: list[Any] = []
        for _ in range(3):
            [ran] = await t.run_workflow(run.id, steps=1)
            seen.append((ran.job.payload, ran.result))
        assert seen == [({"n": 1}, 2), ({"n": 2}, 4), ({"n": 4}, 8)]
        assert await t.run_workflow(run.id) == []
        summary = await app.get_workflow(run.id)
        assert summary is not None and summary.state == "succeeded"

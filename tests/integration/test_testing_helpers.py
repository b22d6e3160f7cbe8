"""tenure.testing, as an application's tests use it: assertions on what was enqueued, a job run
inline through the worker's own claim, executor and fenced outcome, a queue drained, and a
workflow driven step by step, all without a worker, async and thread handlers alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import tenure
import tenure.db.queries
from tenure import JobContext, Permanent, Tenure, chain
from tenure.testing import Inline, SyncInline


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
            match=r'(?s)expected a job of t.receipt with args \{"order_id": 9\} scheduled or pending, '
            r'found 0; the task\'s jobs:\n  job \d+: t.receipt pending on queue "mail", priority 0, '
            r'runs at .*, args \{"order_id": 8\}',
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
        assert ran.state == "dead" and ran.error == "NO_TEMPLATE: tenure.Permanent: the template is missing"
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


async def test_a_fan_out_past_the_inline_limit_is_released_and_run_by_run_workflow(dsn: str) -> None:
    """A fan-out of 100 children (past the 64 a completion releases itself) and their fan-in:
    run_workflow does the workflow pass's work as a worker would, so every child runs once and the
    fan-in gets all 100 results in order."""
    app = _app(dsn)
    double = app.registry.get("t.double")
    assert double is not None
    wf = tenure.Workflow("wide")
    first = wf.step(double.bind(n=0), name="first")
    children = wf.group([double.bind(n=n) for n in range(1, 101)], after=first, name="child")
    total = wf.step(double.bind(), after=children, input="n", name="total")
    async with Inline(app) as t:
        run = await app.enqueue_workflow(wf)
        ran = await t.run_workflow(run.id)
        assert len(ran) == 102
        last = ran[-1]
        assert last.job.id == run.jobs[total.name]
        assert last.job.payload["n"] == [2 * n for n in range(1, 101)]


async def test_drain_and_run_job_leave_jobs_of_tasks_the_app_does_not_register(dsn: str) -> None:
    """Jobs of a misspelt task and of another app's task, on the app's own queues, are neither
    drained nor run: they stay pending with no attempt spent, as a worker of the app leaves them."""
    app = _app(dsn)
    receipt = app.registry.get("t.receipt")
    assert receipt is not None
    async with tenure.Client(dsn) as other:
        typo = await other.enqueue("t.reciept", {"order_id": 1}, queue="mail")
        foreign = [await other.enqueue("billing.invoice", {"n": n}, queue="shop") for n in (1, 2)]
    async with Inline(app) as t:
        mine = await receipt.enqueue(order_id=2)
        runs = await t.drain()
        assert [r.job.id for r in runs] == [mine.id]
        with pytest.raises(
            tenure.ValidationError, match=r"task 'billing\.invoice', which this app does not register"
        ):
            await t.run_job(foreign[0].id)
        left = await t.enqueued()
    assert [(j.id, j.state, j.attempt_count) for j in left] == [
        (typo.id, "pending", 0),
        *((f.id, "pending", 0) for f in foreign),
    ]


async def test_run_job_says_which_other_worker_took_the_job_or_holds_its_row(dsn: str) -> None:
    """A job another worker claimed is refused naming that worker and the way to isolate the
    tests; a job whose row another transaction holds (a worker claiming it) is refused as such,
    not as a paused queue or an ordering key; a paused queue is named when it is the reason."""
    app = _app(dsn)
    receipt = app.registry.get("t.receipt")
    assert receipt is not None
    queries = tenure.db.queries.Queries("tenure")
    async with Inline(app) as t:
        taken, locked, paused = [await receipt.enqueue(order_id=n) for n in (1, 2, 3)]
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await queries.job_claim(
                conn,
                queue="mail",
                owner="dev-laptop-worker",
                limit=1,
                default_lease_seconds=30,
                default_runtime_seconds=60,
                only=[taken.id],
            )
        with pytest.raises(
            tenure.ValidationError, match=r"another worker took it by dev-laptop-worker.*tenure_app"
        ):
            await t.run_job(taken.id)
        async with await psycopg.AsyncConnection.connect(dsn) as holder:
            await holder.execute("SELECT 1 FROM tenure.jobs WHERE id = %s FOR UPDATE", (locked.id,))
            with pytest.raises(tenure.ValidationError, match="its row is locked by another transaction"):
                await t.run_job(locked.id)
        await app.pause_queue("mail", reason="a test of the reason")
        with pytest.raises(tenure.ValidationError, match="its queue 'mail' is paused"):
            await t.run_job(paused.id)


async def test_assert_enqueued_matches_arguments_and_options(dsn: str) -> None:
    """assert_enqueued and refute_enqueued match the arguments (keywords or args=) and the
    options: queue, priority, run time within a tolerance, state and count."""
    app = _app(dsn)
    receipt = app.registry.get("t.receipt")
    assert receipt is not None
    later = datetime.now(UTC) + timedelta(hours=1)
    async with Inline(app) as t:
        await receipt.with_options(priority=3, run_at=later).enqueue(order_id=1)
        await receipt.with_options(queue="urgent").enqueue(order_id=1)
        assert len(await t.assert_enqueued(receipt, args={"order_id": 1}, count=2)) == 2
        [scheduled] = await t.assert_enqueued(
            receipt, order_id=1, priority=3, run_at=later, state="scheduled"
        )
        await t.assert_enqueued(receipt, run_at=later + timedelta(seconds=5), within=10)
        await t.refute_enqueued(receipt, run_at=later + timedelta(seconds=5))
        await t.refute_enqueued(receipt, priority=3, state="pending")
        await t.assert_enqueued(receipt, queue="urgent", state="pending", count=1)
        await t.refute_enqueued(receipt, queue="mail", order_id=1, priority=0)
        with pytest.raises(
            AssertionError, match=r'expected 3 x job of t.receipt with args \{"order_id": 1\}'
        ):
            await t.assert_enqueued(receipt, order_id=1, count=3)
        with pytest.raises(
            AssertionError, match=rf"(?s)expected no job of t.receipt at priority 3 .*job {scheduled.id}:"
        ):
            await t.refute_enqueued(receipt, priority=3)
        with pytest.raises(tenure.ValidationError, match="order_id given both in args= and as keywords"):
            await t.enqueued(receipt, args={"order_id": 1}, order_id=1)
        with pytest.raises(tenure.ValidationError, match="has no time zone"):
            await t.enqueued(receipt, run_at=datetime(2030, 1, 1))


def test_sync_inline_runs_jobs_without_an_event_loop(dsn: str) -> None:
    """SyncInline, the generated blocking twin, asserts, performs, drains and drives a workflow
    from a plain function, as a Django or Flask test would, async and thread handlers alike."""
    app = _app(dsn)
    receipt, order, double = (app.registry.get(n) for n in ("t.receipt", "t.order", "t.double"))
    assert receipt is not None and order is not None and double is not None
    with SyncInline(app) as t:
        job = receipt.enqueue_sync(order_id=4)
        [found] = t.assert_enqueued(receipt, order_id=4, queue="mail")
        assert t.run_job(found.id).result == "sent 4" and found.id == job.id
        assert (t.perform(double, n=21).result, t.enqueued()) == (42, [])
        order.enqueue_sync(order_id=5)
        assert [(r.job.task, r.state) for r in t.drain()] == [
            ("t.order", "succeeded"),
            ("t.receipt", "succeeded"),
        ]
        run = app.enqueue_workflow_sync(chain(double.bind(n=1), double, input="n"))
        assert [r.result for r in t.run_workflow(run.id)] == [2, 4]
    app.close_sync()

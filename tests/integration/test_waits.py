"""Waits and signals on a real worker: a handler waits for a signal or a time holding no slot and no
lease, signals are delivered once, kept for a later waiter, deduplicated, and every race between a
signal, a deadline, a cancel and an operator's end has exactly one outcome."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _inprocess import events, job_row, running, wait_state
from psycopg import AsyncConnection

from tenure import JobContext, Tenure, Unique, ValidationError, WaitResult
from tenure.lab.passes import worker_passes


async def waits(db: AsyncConnection[Any], job_id: int) -> list[tuple[Any, ...]]:
    cur = await db.execute(
        "SELECT name, key, state, signal_id IS NOT NULL FROM tenure.job_waits "
        "WHERE job_id = %s ORDER BY since",
        (job_id,),
    )
    return await cur.fetchall()


async def swept(db: AsyncConnection[Any], job_id: int, timeout: float = 10) -> None:
    """Until a worker's sweep has looked at every wait of the job."""
    deadline = time.monotonic() + timeout
    while True:
        cur = await db.execute("SELECT bool_and(swept) FROM tenure.job_waits WHERE job_id = %s", (job_id,))
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        assert time.monotonic() < deadline, f"the waits of job {job_id} were not swept"
        await asyncio.sleep(0.02)


async def db_now(db: AsyncConnection[Any]) -> Any:
    cur = await db.execute("SELECT statement_timestamp()")
    row = await cur.fetchone()
    assert row is not None
    return row[0]


def approval_app(dsn: str, runs: list[str], style: str = "async") -> Tenure:
    """An order waits up to an hour for its approval; what it did before the wait is counted."""
    app = Tenure(dsn)
    if style == "async":

        @app.task(name="t.order")
        async def order(ctx: JobContext, order_id: int) -> Any:
            runs.append("before")
            got = await ctx.wait_for(f"approve:{order_id}", timeout=3600)
            runs.append(got.outcome)
            return {"outcome": got.outcome, "payload": got.payload}

    else:

        @app.task(name="t.order")
        def order_thread(ctx: JobContext, order_id: int) -> Any:
            runs.append("before")
            got = ctx.wait_for_sync(f"approve:{order_id}", timeout=3600)
            runs.append(got.outcome)
            return {"outcome": got.outcome, "payload": got.payload}

    return app


@pytest.mark.parametrize("style", ["async", "thread"])
async def test_a_signal_wakes_a_waiting_job_and_its_handler_goes_on_past_the_wait(
    dsn: str, db: AsyncConnection[Any], style: str
) -> None:
    """The job leaves running for waiting (no lease, attempt not spent); a signal to its key
    wakes it, and the rerun handler gets the payload from the wait and succeeds."""
    runs: list[str] = []
    app = approval_app(dsn, runs, style)
    job = await app.enqueue("t.order", {"order_id": 7})
    async with running(app):
        row = await wait_state(db, job.id, "waiting")
        assert (row["lease_owner"], row["lease_expires_at"], row["attempt_count"]) == (None, None, 0)
        assert await waits(db, job.id) == [("approve:7", "approve:7", "waiting", False)]
        # Once the worker's sweep has looked at the new wait (and found no signal kept for it),
        # nothing locks its row: the signal is delivered at once. A signal that meets the sweep
        # at its row is kept, and the next sweep delivers it (docs/waits.md).
        await swept(db, job.id)
        sent = await app.signal("approve:7", {"by": "ana"})
        assert (sent.outcome, sent.job_id) == ("delivered", job.id)
        row = await wait_state(db, job.id, "succeeded")
    assert row["result"] == {"outcome": "signalled", "payload": {"by": "ana"}}
    assert row["attempt_count"] == 1 and row["lease_token"] == 2
    assert runs == ["before", "before", "signalled"]
    assert [e[0] for e in await events(db, job.id)] == ["wait", "signalled"]


async def test_a_signal_sent_before_the_wait_is_kept_and_taken_without_leaving_running(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A signal nobody waits for is kept; the handler that waits for it later gets it at once,
    in the same attempt, and it is delivered to that job alone."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    sent = await app.signal("approve:8", {"by": "bo"})
    assert (sent.outcome, sent.job_id) == ("kept", None)
    job = await app.enqueue("t.order", {"order_id": 8})
    async with running(app):
        row = await wait_state(db, job.id, "succeeded")
    assert row["result"] == {"outcome": "signalled", "payload": {"by": "bo"}}
    assert (runs, row["lease_token"]) == (["before", "signalled"], 1), await events(db, job.id)
    assert await waits(db, job.id) == [("approve:8", "approve:8", "signalled", True)]
    cur = await db.execute("SELECT job_id FROM tenure.signals WHERE id = %s", (sent.signal_id,))
    assert await cur.fetchall() == [(job.id,)]


async def test_one_signal_wakes_one_waiter_and_a_duplicate_writes_nothing(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Two jobs wait on one key: a signal wakes the one waiting longest, its duplicate (same
    idempotency key) is a no-op, and a second signal wakes the other."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    first = await app.enqueue("t.order", {"order_id": 9})
    async with running(app):
        await wait_state(db, first.id, "waiting")
        second = await app.enqueue("t.order", {"order_id": 9})
        await wait_state(db, second.id, "waiting")
        one = await app.signal("approve:9", "yes", idempotency_key="webhook-1")
        again = await app.signal("approve:9", "yes", idempotency_key="webhook-1")
        assert (one.outcome, one.job_id) == ("delivered", first.id)
        assert (again.outcome, again.signal_id, again.job_id) == ("duplicate", one.signal_id, first.id)
        await wait_state(db, first.id, "succeeded")
        assert (await job_row(db, second.id))["state"] == "waiting"
        two = await app.signal("approve:9", "yes too", idempotency_key="webhook-2")
        assert (two.outcome, two.job_id) == ("delivered", second.id)
        row = await wait_state(db, second.id, "succeeded")
    assert row["result"]["payload"] == "yes too"
    cur = await db.execute("SELECT count(*) FROM tenure.signals")
    assert await cur.fetchone() == (2,)


async def test_signals_racing_to_one_waiter_wake_it_once_and_the_rest_are_kept(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Ten signals to one waiting job's key, each on its own connection at once, and five more that
    share one idempotency key: the job is woken by exactly one, every other distinct signal is
    kept for a later waiter, and the five sharing a key wrote one row."""
    from tenure.db.wait_queries import WaitQueries
    from tenure.testing import Inline

    runs: list[str] = []
    app = approval_app(dsn, runs)
    async with Inline(app) as t:
        ran = await t.perform(app.registry.get("t.order"), order_id=31)  # type: ignore[arg-type]
    assert ran.state == "waiting"
    waits_q = WaitQueries("tenure")

    async def send(idempotency_key: str | None) -> str:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            sent = await waits_q.signal(
                conn, key="approve:31", payload_json="1", idempotency_key=idempotency_key, keep_seconds=60
            )
            return sent.outcome

    outcomes = await asyncio.gather(*(send(None) for _ in range(10)), *(send("same") for _ in range(5)))
    delivered = [o for o in outcomes if o == "delivered"]
    assert len(delivered) == 1, outcomes
    cur = await db.execute(
        "SELECT count(*) FILTER (WHERE job_id = %s), count(*) FILTER (WHERE job_id IS NULL), count(*) "
        "FROM tenure.signals WHERE key = 'approve:31'",
        (ran.job.id,),
    )
    assert await cur.fetchone() == (1, 10, 11)
    assert (await job_row(db, ran.job.id))["state"] == "pending"
    await app.close()


async def test_a_wait_times_out_at_its_deadline_by_the_database_clock(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A promotion pass at a database time past the deadline wakes the job; its wait returns
    timed out. Before the deadline the pass leaves it waiting."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    job = await app.enqueue("t.order", {"order_id": 10})
    async with running(app):
        await wait_state(db, job.id, "waiting")
    now = await db_now(db)
    async with worker_passes(dsn, "tenure", name="test-promote") as passes:
        early = await passes.promoter.run_once(now=now + timedelta(minutes=59))
        assert early.waits_timed_out == 0 and early.next_due is not None
        late = await passes.promoter.run_once(now=now + timedelta(minutes=61))
        assert late.waits_timed_out == 1
    assert (await job_row(db, job.id))["state"] == "pending"
    async with running(app):
        row = await wait_state(db, job.id, "succeeded")
    assert row["result"] == {"outcome": "timed_out", "payload": None}
    assert [e[0] for e in await events(db, job.id)] == ["wait", "wait_timeout"]


async def test_a_durable_sleep_is_not_started_over_by_a_restart(dsn: str, db: AsyncConnection[Any]) -> None:
    """ctx.sleep keeps its deadline in the database: a new worker after the first stopped does
    not sleep again; the job runs on when the deadline passes, past the sleep, exactly once."""
    app = Tenure(dsn)
    after: list[int] = []

    @app.task(name="t.cool_off")
    async def cool_off(ctx: JobContext) -> str:
        await ctx.sleep(timedelta(hours=24))
        after.append(ctx.attempt)
        return "done"

    job = await app.enqueue("t.cool_off")
    async with running(app):
        await wait_state(db, job.id, "waiting")
    cur = await db.execute("SELECT deadline FROM tenure.job_waits WHERE job_id = %s", (job.id,))
    [(deadline,)] = await cur.fetchall()
    async with running(app):  # the restart: nothing runs, the sleep is not begun again
        await asyncio.sleep(0.3)
        assert (await job_row(db, job.id))["state"] == "waiting"
    cur = await db.execute("SELECT deadline FROM tenure.job_waits WHERE job_id = %s", (job.id,))
    assert await cur.fetchall() == [(deadline,)]
    async with worker_passes(dsn, "tenure", name="test-promote") as passes:
        assert (await passes.promoter.run_once(now=deadline + timedelta(seconds=1))).waits_timed_out == 1
    async with running(app):
        row = await wait_state(db, job.id, "succeeded")
    assert after == [1] and row["result"] == "done"


async def test_cancel_ends_a_wait_and_a_later_signal_is_kept_for_another(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A cancelled waiting job's wait is cancelled with it: a signal to its key afterwards wakes
    nothing and is kept."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    job = await app.enqueue("t.order", {"order_id": 11})
    async with running(app):
        await wait_state(db, job.id, "waiting")
        report = await app.cancel([job.id], reason="order withdrawn")
        assert report.cancelled == [job.id]
        assert (await app.signal("approve:11", True)).outcome == "kept"
    assert await waits(db, job.id) == [("approve:11", "approve:11", "cancelled", False)]
    assert (await job_row(db, job.id))["state"] == "cancelled"


async def test_an_operator_ends_a_wait_and_the_handler_sees_it_ended(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """end_wait wakes the job at once, with who and why in its history; its wait returns
    `ended`. Ending the wait of a job that does not wait is refused, changing nothing."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    job = await app.enqueue("t.order", {"order_id": 12})
    async with running(app):
        await wait_state(db, job.id, "waiting")
        assert await app.end_wait(job.id, reason="approved by phone", actor="ops") == "approve:12"
        row = await wait_state(db, job.id, "succeeded")
        with pytest.raises(ValidationError, match=f"job {job.id} is not waiting"):
            await app.end_wait(job.id, reason="again")
    assert row["result"] == {"outcome": "ended", "payload": None}
    cur = await db.execute(
        "SELECT worker, error FROM tenure.job_events WHERE job_id = %s AND event = 'wait_ended'", (job.id,)
    )
    assert await cur.fetchall() == [("ops", "wait approve:12 ended: approved by phone")]


async def test_a_signal_racing_the_deadline_has_exactly_one_outcome(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Twenty jobs past their deadline, each raced by a signal on its own connection against a
    promotion pass: every job ends its wait once, signalled or timed out, and a signal that
    lost the race is kept, never delivered twice nor lost."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    jobs = [await app.enqueue("t.order", {"order_id": 100 + i}) for i in range(20)]
    async with running(app):
        for job in jobs:
            await wait_state(db, job.id, "waiting")
    past = await db_now(db) + timedelta(hours=2)

    async def send(i: int) -> str:
        return (await app.signal(f"approve:{100 + i}", i)).outcome

    async with worker_passes(dsn, "tenure", name="test-race") as passes:
        results = await asyncio.gather(passes.promoter.run_once(now=past), *(send(i) for i in range(20)))
    outcomes = results[1:]
    cur = await db.execute(
        "SELECT w.state, s.id IS NOT NULL FROM tenure.job_waits w "
        "LEFT JOIN tenure.signals s ON s.job_id = w.job_id WHERE w.job_id = ANY(%s) ORDER BY w.job_id",
        ([j.id for j in jobs],),
    )
    rows = await cur.fetchall()
    for (state, has_signal), outcome in zip(rows, outcomes, strict=True):
        assert (state, has_signal, outcome) in {
            ("signalled", True, "delivered"),
            ("timed_out", False, "kept"),
        }
    cur = await db.execute("SELECT count(*) FROM tenure.signals WHERE job_id IS NULL")
    assert await cur.fetchone() == (outcomes.count("kept"),)
    for job in jobs:
        assert (await job_row(db, job.id))["state"] == "pending"
    await app.close()


async def test_a_send_that_raced_a_wait_unseen_is_delivered_by_the_recovery_pass(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A signal committed by a transaction that began before the job went waiting (neither saw
    the other) is left in the mailbox beside its waiter; the recovery pass delivers it."""
    runs: list[str] = []
    app = approval_app(dsn, runs)
    async with await psycopg.AsyncConnection.connect(dsn) as sender:
        await app.signal("approve:13", "late", conn=sender)  # uncommitted: no waiter sees it
        job = await app.enqueue("t.order", {"order_id": 13})
        # The wait commits under a worker that is then stopped, so that no recovery pass of its
        # own (which would deliver the signal too, as it should) runs between the two commits.
        async with running(app):
            await wait_state(db, job.id, "waiting")
        await sender.commit()
        await asyncio.sleep(0.2)
        assert (await job_row(db, job.id))["state"] == "waiting"
        async with worker_passes(dsn, "tenure", name="test-sweep") as passes:
            await passes.recovery.sweep_signals()
        assert (await job_row(db, job.id))["state"] == "pending"
    async with running(approval_app(dsn, runs)) as worker:
        row = await wait_state(db, job.id, "succeeded")
        assert worker.stats.signals_swept == 0
    assert row["result"] == {"outcome": "signalled", "payload": "late"}


async def test_a_signal_rolled_back_with_its_transaction_was_never_sent(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A signal is written in the caller's transaction: rolled back, no waiter ever sees it."""
    app = Tenure(dsn)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        sent = await app.signal("refund:1", {"amount": 5}, conn=conn)
        assert sent.outcome == "kept"
        await conn.rollback()
    cur = await db.execute("SELECT count(*) FROM tenure.signals")
    assert await cur.fetchone() == (0,)
    await app.close()


@pytest.mark.parametrize(
    ("key", "payload", "options", "problem"),
    [
        ("", None, {}, "signal key must be a string of 1 to 400"),
        ("k" * 401, None, {}, "signal key must be a string of 1 to 400"),
        ("k", {"x": object()}, {}, "payload must be JSON"),
        ("k", "x" * 70_000, {}, "over the limit of 65536"),
        ("k", None, {"keep": 0}, "keeping time must be"),
        ("k", None, {"keep": timedelta(days=91)}, "at most 90 days"),
        ("k", None, {"idempotency_key": ""}, "idempotency key must be"),
    ],
)
async def test_bad_signals_are_refused_before_anything_is_written(
    dsn: str, db: AsyncConnection[Any], key: str, payload: Any, options: dict[str, Any], problem: str
) -> None:
    """A bad key, payload, keeping time or idempotency key raises a ValidationError naming the
    problem, and nothing is written."""
    app = Tenure(dsn)
    with pytest.raises(ValidationError, match=problem):
        await app.signal(key, payload, **options)
    cur = await db.execute("SELECT count(*) FROM tenure.signals")
    assert await cur.fetchone() == (0,)
    await app.close()


async def test_the_sql_function_refuses_bad_signals_with_the_fix(db: AsyncConnection[Any]) -> None:
    """signal() called from SQL checks the same bounds: an over-long key and an oversized payload
    raise invalid_parameter_value with the limit, and nothing is written."""
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="1 to 400 characters"):
        await db.execute("SELECT * FROM tenure.signal(repeat('k', 401))")
    await db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="over the limit of 65536"):
        await db.execute("SELECT * FROM tenure.signal('k', to_jsonb(repeat('x', 70000)))")
    await db.rollback()
    cur = await db.execute("SELECT count(*) FROM tenure.signals")
    assert await cur.fetchone() == (0,)


async def test_mailbox_signals_past_their_keeping_time_are_dropped_and_counted(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A signal kept for a waiter that never came is dropped by the recovery pass once its time
    ends, and counted in signal_totals."""
    app = Tenure(dsn)
    await app.signal("nobody:1", keep=1)
    await app.signal("nobody:2", keep=3600)
    await db.execute("UPDATE tenure.signals SET expires_at = statement_timestamp() WHERE key = 'nobody:1'")
    await db.commit()
    async with worker_passes(dsn, "tenure", name="test-expire") as passes:
        await passes.recovery.sweep_signals()
    cur = await db.execute("SELECT key FROM tenure.signals")
    assert await cur.fetchall() == [("nobody:2",)]
    cur = await db.execute("SELECT expired FROM tenure.signal_totals")
    assert await cur.fetchone() == (1,)
    await app.close()


def test_wait_results_say_how_the_wait_ended() -> None:
    """WaitResult's flags follow its outcome."""
    got = WaitResult("w", "timed_out")
    assert (got.signalled, got.timed_out, got.ended) == (False, True, False)


async def test_a_unique_job_holds_its_key_while_it_waits(dsn: str, db: AsyncConnection[Any]) -> None:
    """A waiting job is still running for uniqueness: enqueuing its twin finds it, and the key
    is free again once it has finished."""
    app = Tenure(dsn)

    @app.task(name="t.sync_account", unique=Unique(fields=("account",)))
    async def sync_account(ctx: JobContext, account: int) -> None:
        await ctx.wait_for(f"synced:{account}", timeout=60)

    job = await app.enqueue("t.sync_account", {"account": 1})
    async with running(app):
        await wait_state(db, job.id, "waiting")
        twin = await app.enqueue("t.sync_account", {"account": 1})
        assert (twin.id, twin.existing) == (job.id, True)
        await app.signal("synced:1")
        await wait_state(db, job.id, "succeeded")
        again = await app.enqueue("t.sync_account", {"account": 1})
        assert not again.existing and again.id != job.id


async def test_a_job_with_an_ordering_key_may_not_wait(dsn: str, db: AsyncConnection[Any]) -> None:
    """A keyed job's wait is refused (its key's next job would run meanwhile): the job is dead
    with WAIT_WITH_ORDERING_KEY and nothing of a wait is written; as any dead head, it holds its
    key's next job back until an operator decides."""
    app = Tenure(dsn)

    @app.task(name="t.keyed", max_attempts=3)
    async def keyed(ctx: JobContext, n: int) -> int:
        if n == 1:
            await ctx.wait_for("never", timeout=60)
        return n

    first = await app.enqueue("t.keyed", {"n": 1}, ordering_key="customer-1")
    second = await app.enqueue("t.keyed", {"n": 2}, ordering_key="customer-1")
    async with running(app):
        row = await wait_state(db, first.id, "dead")
        assert row["last_error_code"] == "WAIT_WITH_ORDERING_KEY"
        await asyncio.sleep(0.3)
        assert (await job_row(db, second.id))["state"] == "pending"
    assert await waits(db, first.id) == []


async def test_the_gauges_count_waiting_jobs_by_queue(dsn: str, db: AsyncConnection[Any]) -> None:
    """The metrics snapshot reports a queue whose only jobs wait, with their number."""
    from tenure.ops.metrics.database import DatabaseCollector

    runs: list[str] = []
    app = approval_app(dsn, runs)
    job = await app.enqueue("t.order", {"order_id": 14}, queue="approvals")
    async with running(app, queues=["approvals"]):
        await wait_state(db, job.id, "waiting")
    collector = DatabaseCollector(dsn)
    try:
        snapshot = await asyncio.to_thread(collector.read)
    finally:
        collector.close()
    assert [(q.queue, q.waiting, q.pending) for q in snapshot.queues] == [("approvals", 1, 0)]


async def test_tenure_testing_drives_waits_and_signals_without_a_worker(dsn: str) -> None:
    """Inline runs a job to its wait, a signal makes it pending, run_job finishes it; pass_time
    ends a sleep's wait at once, without sleeping."""
    from tenure.testing import Inline

    runs: list[str] = []
    app = approval_app(dsn, runs)

    @app.task(name="t.later")
    async def later(ctx: JobContext) -> str:
        await ctx.sleep(timedelta(days=1))
        return "woke"

    async with Inline(app) as t:
        ran = await t.perform(app.registry.get("t.order"), order_id=15)  # type: ignore[arg-type]
        assert ran.state == "waiting"
        await app.signal("approve:15", {"by": "cy"})
        assert (await t.run_job(ran.job.id)).result == {"outcome": "signalled", "payload": {"by": "cy"}}
        slept = await t.perform(later)
        assert slept.state == "waiting"
        assert await t.pass_time(timedelta(hours=23)) == 0
        assert await t.pass_time(timedelta(days=1, minutes=1)) == 1
        assert (await t.run_job(slept.job.id)).result == "woke"


def test_the_blocking_testing_face_drives_a_wait_too(dsn: str) -> None:
    """SyncInline, for tests without an event loop, runs the same steps."""
    from tenure.testing import SyncInline

    runs: list[str] = []
    app = approval_app(dsn, runs, "thread")
    with SyncInline(app) as t:
        ran = t.perform(app.registry.get("t.order"), order_id=16)  # type: ignore[arg-type]
        assert ran.state == "waiting"
        app.signal_sync("approve:16", "ok")
        assert t.run_job(ran.job.id).result == {"outcome": "signalled", "payload": "ok"}
    app.close_sync()

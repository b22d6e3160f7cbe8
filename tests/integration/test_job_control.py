"""Job control through the library: cancel and revoke, retry now, queue pauses,
snooze and results, each guarded in SQL and recorded in the history."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from _inprocess import events, job_row, running, wait_state
from psycopg import AsyncConnection

import tenure
from tenure import JobContext, LeaseLost, Snooze, Tenure


async def test_cancel_by_id_takes_waiting_jobs_and_records_who_and_why(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A pending and a scheduled job are cancelled in one call; each history names the actor
    and the reason, and last_error carries the reason."""
    app = Tenure(dsn)
    now = await app.enqueue("t.any", queue="q")
    later = await app.enqueue("t.any", queue="q", delay=3600)
    report = await app.cancel([now.id, later.id], reason="not needed", actor="ops")
    assert report.cancelled == [now.id, later.id] and report.revoked == []
    for job_id in (now.id, later.id):
        row = await job_row(db, job_id)
        assert (row["state"], row["last_error_code"], row["last_error"]) == (
            "cancelled",
            "CANCELLED",
            "not needed",
        )
    cur = await db.execute("SELECT event, worker, error FROM tenure.job_events WHERE job_id = %s", (now.id,))
    assert await cur.fetchall() == [("cancel", "ops", "not needed")]
    await app.close()


async def test_cancelling_a_finished_job_refuses_the_whole_call(dsn: str, db: AsyncConnection[Any]) -> None:
    """One succeeded job among the ids refuses the call, naming it; the pending one stays
    pending: nothing half-done."""
    app = Tenure(dsn)

    @app.task(name="t.ok")
    async def ok(ctx: JobContext) -> None:
        pass

    done = await app.enqueue("t.ok")
    async with running(app):
        await wait_state(db, done.id, "succeeded")
    waiting = await app.enqueue("t.any", queue="elsewhere")
    with pytest.raises(tenure.ControlRefused, match=rf"job {done.id} is succeeded.*nothing was cancelled"):
        await app.cancel([waiting.id, done.id], reason="tidy")
    with pytest.raises(tenure.ControlRefused, match="there is no job 999999"):
        await app.cancel([999999], reason="tidy")
    assert (await job_row(db, waiting.id))["state"] == "pending"
    await app.close()


async def test_cancel_by_filter_is_bounded_and_says_when_nothing_matches(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A payload filter takes exactly its matches; more matches than max_jobs refuse the call
    with nothing changed; a filter matching nothing is an error."""
    app = Tenure(dsn)
    red = [(await app.enqueue("t.any", {"colour": "red"}, queue="paint")).id for _ in range(3)]
    blue = (await app.enqueue("t.any", {"colour": "blue"}, queue="paint")).id
    with pytest.raises(tenure.TooManyMatched, match="more than 2 jobs match"):
        await app.cancel(queue="paint", contains={"colour": "red"}, reason="wrong colour", max_jobs=2)
    assert [(await job_row(db, i))["state"] for i in red] == ["pending"] * 3
    report = await app.cancel(queue="paint", contains={"colour": "red"}, reason="wrong colour")
    assert report.cancelled == red
    assert (await job_row(db, blue))["state"] == "pending"
    with pytest.raises(tenure.NothingMatched):
        await app.cancel(queue="paint", contains={"colour": "green"}, reason="none")
    with pytest.raises(tenure.ValidationError, match="reason is required"):
        await app.cancel([blue], reason="  ")
    await app.close()


async def test_revoking_a_running_async_job_refuses_every_later_write_of_its_holder(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """An async handler that swallows cancellation is revoked: the token moves on, its ctx.atomic
    write rolls back (LeaseLost), the job stays cancelled, and the worker stopped it."""
    app = Tenure(dsn)
    started, attempted = asyncio.Event(), asyncio.Event()
    outcome: list[str] = []

    @app.task(name="t.stubborn", max_attempts=1)
    async def stubborn(ctx: JobContext) -> None:
        started.set()
        for _ in range(200):
            with contextlib.suppress(asyncio.CancelledError):  # ignores the signal
                await asyncio.sleep(0.02)
        try:

            async def write(tx: Any) -> None:
                await tx.conn.execute("INSERT INTO stubborn_writes VALUES (1)")

            await ctx.atomic(write)
            outcome.append("committed")
        except LeaseLost:
            outcome.append("refused")
        attempted.set()

    await db.execute("CREATE TABLE stubborn_writes (n int)")
    job = await app.enqueue("t.stubborn")
    async with running(app, lease_seconds=30.0) as worker:
        await asyncio.wait_for(started.wait(), 10)
        token = (await job_row(db, job.id))["lease_token"]
        report = await app.cancel([job.id], reason="runaway")
        assert report.revoked == [job.id]
        row = await job_row(db, job.id)
        assert (row["state"], row["lease_token"], row["lease_owner"]) == ("cancelled", token + 1, None)
        await asyncio.wait_for(attempted.wait(), 15)
        assert worker.services is not None and worker.services.stats.revoked == 1
    assert outcome == ["refused"]
    assert await (await db.execute("SELECT count(*) FROM stubborn_writes")).fetchone() == (0,)
    assert (await job_row(db, job.id))["state"] == "cancelled"
    history = [e[0] for e in await events(db, job.id)]
    assert "revoke" in history and "lease_lost" in history
    await app.close()


async def test_a_thread_handler_learns_of_a_revoke_at_its_next_check(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A thread handler is revoked; its next ctx.check() raises LeaseLost within a heartbeat
    interval even with notifications off (the heartbeat's lease check finds it)."""
    app = Tenure(dsn)
    started, stopped = threading.Event(), threading.Event()
    seen: list[str] = []

    @app.task(name="t.thread")
    def worker_thread(ctx: JobContext) -> None:
        started.set()
        try:
            for _ in range(1000):
                ctx.check()
                time.sleep(0.01)
        except LeaseLost as exc:
            seen.append(exc.reason)
        stopped.set()

    job = await app.enqueue("t.thread")
    async with running(app, lease_seconds=3.0, listen=False):
        await asyncio.to_thread(started.wait, 10)
        revoked_at = time.monotonic()
        await app.cancel([job.id], reason="stop it")
        assert await asyncio.to_thread(stopped.wait, 10)
        took = time.monotonic() - revoked_at
    assert seen and "revoked by an operator: stop it" in seen[0]
    assert took < 3.0, f"heard of the revoke after {took:.2f}s, beyond one heartbeat (1 s) plus slack"
    await app.close()


async def test_requeue_gives_a_running_job_back_under_a_new_token(dsn: str, db: AsyncConnection[Any]) -> None:
    """Revoke with requeue: the job is pending again at once, the revoked attempt not counted,
    and the next attempt runs under a higher token and succeeds, showing no error (the revoke's
    reason stays in the history)."""
    app = Tenure(dsn)
    first = asyncio.Event()
    tokens: list[int] = []

    @app.task(name="t.hangs_once")
    async def hangs_once(ctx: JobContext) -> None:
        tokens.append(ctx.token)
        if len(tokens) == 1:
            first.set()
            await asyncio.sleep(60)

    job = await app.enqueue("t.hangs_once")
    async with running(app, lease_seconds=30.0):
        await asyncio.wait_for(first.wait(), 10)
        report = await app.cancel([job.id], reason="hung", requeue=True)
        assert report.revoked == [job.id] and report.requeue
        row = await wait_state(db, job.id, "succeeded")
    assert row["attempt_count"] == 1, "the revoked attempt was counted"
    assert (row["last_error_code"], row["last_error"]) == (None, None)
    assert tokens[1] > tokens[0] + 1
    assert [e[0] for e in await events(db, job.id)][:1] == ["revoke"]
    with pytest.raises(tenure.ControlRefused, match="requeue gives back running jobs only"):
        waiting = await app.enqueue("t.any", queue="other")
        await app.cancel([waiting.id], reason="x", requeue=True)
    await app.close()


async def test_retry_runs_waiting_jobs_now_and_reprocesses_cancelled_ones(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """retry moves a scheduled job's run time to now and brings a cancelled job back, each with a
    history entry; a running or unknown id refuses the call."""
    app = Tenure(dsn)
    later = await app.enqueue("t.any", queue="q", delay=3600)
    gone = await app.enqueue("t.any", queue="q")
    await app.cancel([gone.id], reason="oops")
    moved = await app.retry([later.id, gone.id], reason="run them now")
    assert moved == [later.id, gone.id]
    for job_id, event in ((later.id, "retry_now"), (gone.id, "reprocess")):
        row = await job_row(db, job_id)
        # the scheduled job was due an hour after it was made; now it is due at once
        assert row["state"] == "pending" and row["available_at"] - row["created_at"] < timedelta(minutes=1)
        assert (await events(db, job_id))[-1][0] == event
    with pytest.raises(tenure.ControlRefused, match="there is no job 424242"):
        await app.retry([later.id, 424242], reason="x")
    await app.close()


async def test_a_paused_queue_is_claimed_by_no_worker_until_resumed(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Pausing stops claims from that queue only; resume drains it; pausing an unknown queue
    and resuming one that is not paused are errors."""
    app = Tenure(dsn)

    @app.task(name="t.paused", queue="slow")
    async def paused(ctx: JobContext) -> None:
        pass

    @app.task(name="t.free", queue="fast")
    async def free(ctx: JobContext) -> None:
        pass

    with pytest.raises(tenure.ControlRefused, match="no job was ever enqueued to queue 'slow'"):
        await app.pause_queue("slow", reason="deploy")
    pause = await app.pause_queue("slow", reason="deploy", allow_unknown=True)
    assert pause.until is None and [p.queue for p in await app.paused_queues()] == ["slow"]
    held = [(await app.enqueue("t.paused")).id for _ in range(3)]
    fine = await app.enqueue("t.free")
    async with running(app, poll_interval=0.05):
        await wait_state(db, fine.id, "succeeded")
        await asyncio.sleep(0.5)
        assert [(await job_row(db, i))["state"] for i in held] == ["pending"] * 3
        await app.resume_queue("slow")
        for job_id in held:
            await wait_state(db, job_id, "succeeded")
    with pytest.raises(tenure.ControlRefused, match="is not paused"):
        await app.resume_queue("slow")
    await app.close()


async def test_a_pause_until_a_time_ends_by_itself(dsn: str, db: AsyncConnection[Any]) -> None:
    """A pause for 1 s holds the queue, then claims resume without anyone resuming it (and a
    resume after that is refused: the pause is over)."""
    app = Tenure(dsn)

    @app.task(name="t.later", queue="timed")
    async def later(ctx: JobContext) -> None:
        pass

    job = await app.enqueue("t.later")
    await app.pause_queue("timed", reason="maintenance window", until=1.0)
    async with running(app, poll_interval=0.05):
        await asyncio.sleep(0.5)
        assert (await job_row(db, job.id))["state"] == "pending"
        await wait_state(db, job.id, "succeeded", timeout=5)
    with pytest.raises(tenure.ControlRefused, match="is not paused"):  # its time ended it already
        await app.resume_queue("timed")
    with pytest.raises(tenure.ValidationError, match="not in the future"):
        await app.pause_queue("timed", reason="x", until=-5)
    await app.close()


@pytest.mark.parametrize("style", ["async", "thread"])
async def test_snooze_waits_without_spending_an_attempt(
    dsn: str, db: AsyncConnection[Any], style: str
) -> None:
    """A handler that returns (async) or raises (thread) Snooze twice runs a third time and
    succeeds with attempt_count 1 and a budget of 1; both snoozes are in its history."""
    app = Tenure(dsn)
    runs: list[int] = []

    if style == "async":

        @app.task(name="t.snoozy", max_attempts=1)
        async def snoozy(ctx: JobContext) -> Any:
            runs.append(ctx.attempt)
            return Snooze(0.1, "not yet") if len(runs) < 3 else "ready"

    else:

        @app.task(name="t.snoozy", max_attempts=1)
        def snoozy_thread(ctx: JobContext) -> Any:
            runs.append(ctx.attempt)
            if len(runs) < 3:
                raise Snooze(0.1, "not yet")
            return "ready"

    job = await app.enqueue("t.snoozy")
    async with running(app):
        row = await wait_state(db, job.id, "succeeded")
    assert runs == [1, 1, 1]
    assert (row["attempt_count"], row["snoozes"], row["result"]) == (1, 2, "ready")
    assert [e[0] for e in await events(db, job.id)] == ["snooze", "snooze"]
    await app.close()


async def test_snoozing_past_the_bound_makes_the_job_dead(dsn: str, db: AsyncConnection[Any]) -> None:
    """With max_snoozes=2 the third snooze is refused: the job is dead with SNOOZE_LIMIT."""
    app = Tenure(dsn)

    @app.task(name="t.forever", max_snoozes=2)
    async def forever(ctx: JobContext) -> Snooze:
        return Snooze(0)

    job = await app.enqueue("t.forever")
    async with running(app):
        row = await wait_state(db, job.id, "dead")
    assert (row["last_error_code"], row["snoozes"]) == ("SNOOZE_LIMIT", 2)
    await app.close()


@pytest.mark.parametrize("listen", [True, False], ids=["listen", "poll-only"])
async def test_results_round_trip_and_waiting_works(dsn: str, db: AsyncConnection[Any], listen: bool) -> None:
    """A waited-for job's result comes back through app.result (LISTEN, or polling when the
    waiter cannot listen); a dead job raises JobFailed with its error; a timeout raises."""
    app = Tenure(dsn)

    @app.task(name="t.add")
    async def add(ctx: JobContext, a: int, b: int) -> dict[str, int]:
        await asyncio.sleep(0.2)
        return {"sum": a + b}

    @app.task(name="t.broken", max_attempts=1)
    def broken(ctx: JobContext) -> None:
        raise tenure.Permanent("bad input", code="BAD_INPUT")

    job = await app.enqueue("t.add", {"a": 2, "b": 3}, result_wanted=True)
    bad = await app.enqueue("t.broken", result_wanted=True)
    never = await app.enqueue("t.any", queue="nobody")
    if not listen:
        await app.client.pool()
        app.client._pool.conninfo = lambda: dsn  # type: ignore[union-attr,assignment,method-assign]
    async with running(app):
        assert await app.result(job.id, timeout=10, poll=0.2) == {"sum": 5}
        with pytest.raises(tenure.JobFailed, match=rf"job {bad.id} is dead: BAD_INPUT"):
            await app.result(bad.id, timeout=10, poll=0.2)
        with pytest.raises(tenure.ResultTimeout, match="still pending"):
            await app.result(never.id, timeout=0.3, poll=0.1)
    assert await asyncio.to_thread(app.result_sync, job.id, timeout=1) == {"sum": 5}
    await app.close()


async def test_a_result_that_is_not_json_or_too_large_fails_the_job_permanently(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A handler returning a set, or more than max_result_bytes, leaves the job dead with
    RESULT_NOT_JSON / RESULT_TOO_LARGE and a message naming the fix."""
    app = Tenure(dsn)

    @app.task(name="t.set", max_attempts=3)
    async def returns_set(ctx: JobContext) -> Any:
        return {1, 2}

    @app.task(name="t.big", max_attempts=3)
    def returns_big(ctx: JobContext) -> Any:
        return "x" * 2000

    a = await app.enqueue("t.set")
    b = await app.enqueue("t.big")
    async with running(app, max_result_bytes=1000):
        ra = await wait_state(db, a.id, "dead")
        rb = await wait_state(db, b.id, "dead")
    assert ra["last_error_code"] == "RESULT_NOT_JSON" and "not JSON" in ra["last_error"]
    assert rb["last_error_code"] == "RESULT_TOO_LARGE" and "max_result_bytes" in rb["last_error"]
    assert ra["attempt_count"] == rb["attempt_count"] == 1
    await app.close()


async def test_a_result_returned_after_ctx_atomic_is_stored_and_wakes_the_waiter(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A handler that completes in its own transaction and then returns a value: the job's
    result is that value, and a waiter gets it."""
    app = Tenure(dsn)

    @app.task(name="t.atomic")
    async def atomic(ctx: JobContext) -> str:
        async def work(tx: Any) -> None:
            await tx.conn.execute("SELECT 1")

        await ctx.atomic(work)
        return "stored after commit"

    job = await app.enqueue("t.atomic", result_wanted=True)
    async with running(app):
        assert await app.result(job.id, timeout=10) == "stored after commit"
    assert (await job_row(db, job.id))["result"] == "stored after commit"
    await app.close()

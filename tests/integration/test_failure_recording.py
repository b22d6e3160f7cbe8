"""What a worker writes when a job fails or its lease ends: the handler's own exception with its
class and traceback, text PostgreSQL can store, MAX_RUNTIME at the deadline, the stale holder's
lease_lost, and completion and recovery that keep their own rules."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from _inprocess import events, eventually, job_row, running, wait_state
from psycopg import AsyncConnection

from tenure import Backoff, FailurePolicy, JobContext, JobFailed, JobSpec, Permanent, Tenure
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.tasks import TaskRegistry
from tenure.worker import listener as listener_module
from tenure.worker.listener import Listener
from tenure.worker.options import WorkerOptions
from tenure.worker.recovery import Recovery
from tenure.worker.service import Supervisor
from tenure.worker.services import WorkerServices

CLAIM = {"queue": "default", "limit": 5, "default_lease_seconds": 30.0, "default_runtime_seconds": 60.0}


async def test_a_tenure_error_is_named_as_it_is_imported(dsn: str, db: AsyncConnection[Any]) -> None:
    """A handler's tenure.Permanent is stored, and told to a waiter, as `tenure.Permanent`, the
    name a user imports, not the module that defines it."""
    app = Tenure(dsn)

    @app.task(name="refuses")
    async def refuses(ctx: JobContext) -> None:
        raise Permanent("the card was declined")

    async with running(app):
        job = await app.enqueue("refuses")
        row = await wait_state(db, job.id, "dead")
        with pytest.raises(JobFailed) as failed:
            await app.result(job.id, timeout=5, poll=0.05)
    assert "tenure.Permanent: the card was declined" in row["last_error"]
    assert "tenure.model" not in row["last_error"]
    assert str(failed.value).endswith("tenure.Permanent: the card was declined")


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_a_handlers_own_timeout_error_follows_its_failure_policy(
    dsn: str, db: AsyncConnection[Any], kind: str
) -> None:
    """A TimeoutError raised by the handler is the handler's failure, classified by the task's
    FailurePolicy (here: permanent) with its traceback, never Tenure's MAX_RUNTIME."""
    app = Tenure(dsn)
    policy = FailurePolicy(permanent=(TimeoutError,))

    if kind == "async":

        @app.task(name="upstream", failure=policy)
        async def upstream_async(ctx: JobContext) -> None:
            raise TimeoutError("the upstream API took too long")

    else:

        @app.task(name="upstream", failure=policy)
        def upstream_sync(ctx: JobContext) -> None:
            raise TimeoutError("the upstream API took too long")

    async with running(app):
        job = await app.enqueue("upstream")
        row = await wait_state(db, job.id, "dead")
    assert row["last_error_code"] == "TimeoutError"
    assert row["last_error"].startswith("[permanent] Traceback")
    assert "the upstream API took too long" in row["last_error"]
    assert row["attempt_count"] == 1


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_an_error_text_with_a_nul_still_settles_the_job_at_once(
    dsn: str, db: AsyncConnection[Any], kind: str
) -> None:
    """An exception whose message holds a NUL (and a lone surrogate) settles the job at once, with
    the characters written as visible stand-ins, instead of leaving it running until its lease ends."""
    app = Tenure(dsn)
    message = "bad byte \x00 in \udcff record"

    if kind == "async":

        @app.task(name="binary", max_attempts=1)
        async def binary_async(ctx: JobContext) -> None:
            raise ValueError(message)

    else:

        @app.task(name="binary", max_attempts=1)
        def binary_sync(ctx: JobContext) -> None:
            raise ValueError(message)

    async with running(app, lease_seconds=30.0):
        job = await app.enqueue("binary")
        row = await wait_state(db, job.id, "dead", timeout=5)
    assert "bad byte \\x00 in ? record" in row["last_error"]
    assert row["last_error_code"] == "ValueError"


async def test_an_async_handler_past_its_max_runtime_is_recorded_at_the_deadline(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """An async handler that keeps its lease alive past max_runtime is cancelled at the deadline and
    its own worker writes MAX_RUNTIME (a retry), not recovery's LEASE_EXPIRED seconds later."""
    app = Tenure(dsn)

    @app.task(name="forever", max_runtime_seconds=1.0, lease_seconds=10.0, max_attempts=2)
    async def forever(ctx: JobContext) -> None:
        step = 0
        while True:
            step += 1
            ctx.progress(step)
            await asyncio.sleep(0.05)

    async with running(app):
        job = await app.enqueue("forever")
        started = time.monotonic()
        row = await wait_state(db, job.id, "dead", timeout=20)
        took = time.monotonic() - started
    assert row["last_error_code"] == "MAX_RUNTIME"
    assert took < 6.0, f"two 1 s runtimes ended after {took:.1f}s"
    history = [(e[0], e[4]) for e in await events(db, job.id)]
    assert history == [("retry", "MAX_RUNTIME"), ("dead", "MAX_RUNTIME")], history


async def test_a_stale_async_holder_records_its_lost_lease(dsn: str, db: AsyncConnection[Any]) -> None:
    """An async handler that shows no progress loses its lease to its own watchdog: the job's
    history gets the holder's lease_lost (with its token) beside recovery's lease_expired."""
    app = Tenure(dsn)

    @app.task(name="silent", max_attempts=1)
    async def silent(ctx: JobContext) -> None:
        await asyncio.sleep(60)

    async with running(app, lease_seconds=1.0) as worker:
        job = await app.enqueue("silent")
        await wait_state(db, job.id, "dead", timeout=20)
        deadline = time.monotonic() + 5
        history: list[tuple[Any, ...]] = []
        while time.monotonic() < deadline:
            history = await events(db, job.id)
            if any(e[0] == "lease_lost" for e in history):
                break
            await asyncio.sleep(0.05)
    lost = [e for e in history if e[0] == "lease_lost"]
    assert lost and lost[0][3] == 1 and lost[0][4] == "LEASE_EXPIRED", history
    cur = await db.execute(
        "SELECT worker FROM tenure.job_events WHERE job_id = %s AND event = 'lease_lost'", (job.id,)
    )
    assert (await cur.fetchone()) == (worker.options.worker_id,)


async def test_a_completion_repeated_after_a_lost_reply_is_done_not_a_fencing_loss(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """When a completion committed but its reply was lost, writing it again answers 'done' for that
    (id, token) and records no fencing loss; another token's write is still refused."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t")])
    [claimed] = await queries.job_claim(db, owner="w", **CLAIM)
    lease = (job.id, claimed.lease.token)
    assert await queries.job_complete_many(db, owner="w", leases=[lease]) == {lease: "done"}
    assert await queries.job_complete_many(db, owner="w", leases=[lease]) == {lease: "done"}
    assert await events(db, job.id) == []
    stale = (job.id, claimed.lease.token - 1)
    assert await queries.job_complete_many(db, owner="w", leases=[stale]) == {stale: "lost"}
    assert [e[0] for e in await events(db, job.id)] == ["fencing_lost"]


async def test_lease_expiry_retries_use_the_tasks_backoff_and_name_the_fix(
    dsn: str, db: AsyncConnection[Any], queries: Queries
) -> None:
    """Recovery schedules an expired lease's retry with its task's own backoff (not the worker's
    default) and its LEASE_EXPIRED text says what to do about it."""
    registry = TaskRegistry()
    registry.register(lambda ctx: None, name="slow.backoff", backoff=Backoff(base=600, cap=600, jitter=0))
    [job] = await queries.job_insert_many(db, [JobSpec(task="slow.backoff")])
    [claimed] = await queries.job_claim(db, owner="w", **CLAIM)
    pool = await open_pool(dsn, min_size=1, max_size=2)
    try:
        services = WorkerServices(pool=pool, queries=queries, options=WorkerOptions(), dsn=dsn)
        later = claimed.lease.expires_at + timedelta(seconds=1)
        [recovered] = await Recovery(services, registry).run_once(now=later)
    finally:
        await pool.close()
    assert recovered.job_id == job.id
    row = await job_row(db, job.id)
    assert row["available_at"] == later + timedelta(seconds=600)
    assert "ctx.progress()" in row["last_error"] and "lease_seconds" in row["last_error"]


async def test_session_settings_made_in_atomic_do_not_leak_into_the_pool(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A thread handler's SET inside ctx.atomic_sync is undone before its connection is reused: the
    next job on the same one-connection pool sees the default, under Tenure's application_name."""
    app = Tenure(dsn)
    seen: list[tuple[str, str]] = []

    @app.task(name="setter")
    def setter(ctx: JobContext) -> None:
        ctx.atomic_sync(lambda tx: tx.execute("SET search_path = leaked"))

    @app.task(name="reader")
    def reader(ctx: JobContext) -> None:
        def read(tx: Any) -> None:
            [row] = tx.execute(
                "SELECT current_setting('search_path') AS p, current_setting('application_name') AS a"
            )
            seen.append((row["p"], row["a"]))

        ctx.atomic_sync(read)

    async with running(app, concurrency=1):
        first = await app.enqueue("setter")
        await wait_state(db, first.id, "succeeded")
        second = await app.enqueue("reader")
        await wait_state(db, second.id, "succeeded")
    assert seen == [('"$user", public', "tenure-sync")]


async def test_a_listener_that_receives_no_notifications_says_so_and_polling_drains(
    dsn: str,
    db: AsyncConnection[Any],
    caplog: pytest.LogCaptureFixture,
    server_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LISTEN on a connection that never sees the pool's notifications (as behind PgBouncer in
    transaction mode) is detected by its probe and named in a warning; jobs still drain by polling."""
    app = Tenure(dsn)

    @app.task(name="noop")
    async def noop(ctx: JobContext) -> None:
        pass

    caplog.set_level(logging.WARNING, logger="tenure.worker")
    monkeypatch.setattr(listener_module, "PROBE_TIMEOUT", 0.5)
    # Another database on the same server: a LISTEN there never hears this database's NOTIFY.
    async with running(app, listen_dsn=server_dsn, poll_interval=0.2):
        await eventually(lambda: "receives no notifications" in caplog.text, what="the listener's warning")
        job = await app.enqueue("noop")
        await wait_state(db, job.id, "succeeded")
    assert "receives no notifications" in caplog.text and "--listen-dsn" in caplog.text


async def test_a_probe_lost_once_after_a_failover_makes_no_pooler_warning(
    dsn: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first probe is lost (as when the pool still holds a session on the old primary right
    after a failover) and the next one arrives: the listener does not claim to be behind a pooler."""
    monkeypatch.setattr(listener_module, "PROBE_TIMEOUT", 0.5)
    caplog.set_level(logging.WARNING, logger="tenure.worker")
    sent: list[str] = []

    async def lose_the_first(payload: str) -> None:
        sent.append(payload)
        if len(sent) > 1:
            async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute("SELECT pg_notify(%s, %s)", (listener.channel, payload))

    listener = Listener(dsn, "tenure", {"default"}, lambda: None, send_probe=lose_the_first)
    task = asyncio.create_task(Supervisor().run(listener))
    try:
        await eventually(lambda: len(sent) >= 2 and listener.probe_arrived.is_set(), what="a probe arriving")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert "receives no notifications" not in caplog.text

"""Waking workers for enqueued jobs: an enqueue that owns its commit notifies after it, in a
transaction of its own; a client leaves out a queue's notification for NOTIFY_COOLDOWN after
sending one, and workers claim again that long after each one, so no job waits for a poll."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _inprocess import eventually, running
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tenure import Client, JobContext, JobSpec, SyncClient, Tenure, Worker
from tenure.db import wakeups
from tenure.db.channels import SCHEDULED_PREFIX, notify_channel
from tenure.db.queries import Queries
from tenure.db.wakeups import Wakeups

CHANNEL = notify_channel("tenure")


async def listen(dsn: str) -> AsyncConnection[Any]:
    conn = await AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
    return conn


async def heard(listener: AsyncConnection[Any], timeout: float, expect: int | None = None) -> list[str]:
    return [n.payload async for n in listener.notifies(timeout=timeout, stop_after=expect)]


async def test_an_insert_given_wakeups_notifies_nothing_and_says_what_to_notify(
    dsn: str, queries: Queries
) -> None:
    """job_insert_many with `wakeups` sends no notification; it names the queue of the job due now
    and the earliest run time of the scheduled ones, for the caller to send after its commit."""
    listener = await listen(dsn)
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
            later = datetime.now(UTC) + timedelta(hours=1)
            found = Wakeups()
            specs = [
                JobSpec(task="t", queue="now"),
                JobSpec(task="t", queue="later", run_at=later),
                JobSpec(task="t", queue="later", run_at=later + timedelta(hours=1)),
            ]
            jobs = await queries.job_insert_many(conn, specs, wakeups=found)
            assert len(jobs) == 3
            assert await heard(listener, 0.5) == []
            assert found.queues == {"now"} and found.first_scheduled == later
    finally:
        await listener.close()


async def test_a_notification_after_commit_leaves_the_session_committing_durably(
    dsn: str, queries: Queries
) -> None:
    """The wake-up sent after a commit commits without waiting for its flush, and only it: the
    session's next transaction is durable again."""
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        await queries.queue_notify(conn, ["q"], after_commit=True)
        row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
        assert row is not None and row[0] == "on"


async def test_an_enqueue_on_its_own_commit_wakes_listeners_once_it_is_visible(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Client.enqueue on its own pool, and on a caller's autocommit connection: the queue's
    notification arrives, and the job is already visible to another session when it does."""
    listener = await listen(dsn)
    try:
        async with Client(dsn) as client, await AsyncConnection.connect(dsn, autocommit=True) as conn:
            for given in (None, conn):
                job = await client.enqueue("t", {}, queue=f"q{job_count(given)}", conn=given)
                assert len(await heard(listener, 2.0, expect=1)) == 1
                row = await (
                    await db.execute("SELECT state::text FROM tenure.jobs WHERE id = %s", (job.id,))
                ).fetchone()
                assert row == ("pending",)
    finally:
        await listener.close()


def job_count(conn: object) -> int:
    return 0 if conn is None else 1


@pytest.fixture
def long_cooldown(monkeypatch: pytest.MonkeyPatch) -> float:
    """NOTIFY_COOLDOWN at two seconds, for producers and workers alike, so that a job can run and
    its worker go idle well within one cooldown."""
    monkeypatch.setattr(wakeups, "NOTIFY_COOLDOWN", 2.0)
    return 2.0


def running_jobs(worker: Worker) -> int:
    return 0 if worker.executor is None else len(worker.executor.running)


async def _second_job_runs_without_a_notification(dsn: str, enqueue: Any) -> None:
    """A worker that never polls (poll interval 60 s) runs a job and goes idle; a second job from
    the same client within the cooldown is enqueued without a notification, and still runs: the
    worker's follow-up claim, a cooldown after the first notification, finds it."""
    app = Tenure(dsn)
    ran: list[int] = []

    @app.task(name="short", queue="burst")
    def short(ctx: JobContext, n: int) -> None:  # a plain function: runs in a thread
        ran.append(n)

    listener = await listen(dsn)
    try:
        # Without hand-off: the first job notifies its queue, rather than going to the idle
        # worker's offer (tests/integration/test_hand_off.py has the same with it).
        async with running(app, poll_interval=60.0, concurrency=4, hand_off=False) as worker:
            await asyncio.sleep(0.2)  # the worker's listener is up
            first_sent = time.monotonic()
            await enqueue(0)
            await eventually(
                lambda: ran == [0] and worker.executor is not None and not worker.executor.running,
                what="the first job run",
            )
            await enqueue(1)
            assert time.monotonic() - first_sent < 2.0, "the machine was too slow to test the follow-up"
            wakeups_heard = [n for n in await heard(listener, 0.3) if n == "burst"]
            assert wakeups_heard == ["burst"]  # the second job's was left out
            await eventually(lambda: ran == [0, 1], timeout=10, what="the second job run")
    finally:
        await listener.close()


async def test_a_job_whose_notification_was_left_out_runs_without_polling(
    dsn: str, long_cooldown: float
) -> None:
    """Client: the second job of two within the cooldown runs, found by the follow-up claim."""
    async with Client(dsn) as client:

        async def enqueue(n: int) -> None:
            await client.enqueue("short", {"n": n}, queue="burst")

        await _second_job_runs_without_a_notification(dsn, enqueue)


async def test_a_sync_clients_job_whose_notification_was_left_out_runs_without_polling(
    dsn: str, long_cooldown: float
) -> None:
    """The same with SyncClient, called from a thread as a Django or Flask view would."""
    with SyncClient(dsn) as client:

        async def enqueue(n: int) -> None:
            await asyncio.to_thread(client.enqueue, "short", {"n": n}, queue="burst")

        await _second_job_runs_without_a_notification(dsn, enqueue)


async def test_a_failed_wakeup_after_commit_returns_the_job_and_warns(
    dsn: str, db: AsyncConnection[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The jobs are stored when their notification fails: enqueue returns them (raising would
    invite a second enqueue) and warns that workers find them at their next poll. (A job that may
    go in scheduled: its hint always follows its commit.)"""
    async with Client(dsn) as client:

        async def broken(*args: Any, **kwargs: Any) -> None:
            raise psycopg.OperationalError("the connection was closed")

        monkeypatch.setattr(client.queries, "notify_wakeups", broken)
        with caplog.at_level(logging.WARNING, logger="tenure.client"):
            job = await client.enqueue("t", {}, queue="q", delay=60)
        row = await (await db.execute("SELECT count(*) FROM tenure.jobs WHERE id = %s", (job.id,))).fetchone()
        assert row == (1,)
        assert "next poll" in caplog.text and "connection was closed" in caplog.text


async def test_an_idle_lone_enqueue_notifies_inside_its_own_commit(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone job due now, on a commit of its own, with no notification of its queue in the last
    cooldown: its insert notifies inside that commit (delivered with it), and no wake-up is sent
    after it; one more within the cooldown sends none at all."""
    listener = await listen(dsn)
    try:
        async with Client(dsn) as client:
            after_commit: list[Any] = []

            async def counted(*args: Any, **kwargs: Any) -> None:
                after_commit.append(args)

            monkeypatch.setattr(client.queries, "notify_wakeups", counted)
            monkeypatch.setattr(wakeups, "NOTIFY_COOLDOWN", 5.0)
            await client.enqueue("t", {}, queue="inline")
            await client.enqueue("t", {}, queue="inline")
            assert [n for n in await heard(listener, 0.5) if n == "inline"] == ["inline"]
            await asyncio.sleep(0.2)  # a background sender would have run by now
            assert after_commit == []
    finally:
        await listener.close()


async def test_commits_made_while_a_wakeup_waits_for_a_connection_share_the_next_one(dsn: str) -> None:
    """Fifty enqueues of jobs that may go in scheduled (whose hints follow their commits), each
    owning its commit, while the client's pool has no connection to lend: once one is free, the
    promoters are told at most twice (the notification that was waiting, then one for every commit
    made meanwhile), not once per commit, each one waiting for a connection."""
    listener = await listen(dsn)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    try:
        async with (
            Client(dsn, pool=pool) as client,
            await AsyncConnection.connect(dsn, autocommit=True) as conn,
        ):
            async with pool.connection():  # the pool's one connection: no wake-up can go out
                for _ in range(50):
                    await client.enqueue("t", {}, queue="burst", conn=conn, delay=60)
                assert await heard(listener, 0.3) == []
            notified = [n for n in await heard(listener, 1.5) if n.startswith(SCHEDULED_PREFIX)]
            assert 1 <= len(notified) <= 2, notified
    finally:
        await listener.close()
        await pool.close()

"""Hand-off on a real worker: an idle worker's offer is taken by a lone job inside its enqueue's
own INSERT, and the job reaches the worker already claimed (attempt 1, token 1, its lease); a job
that must not pass another, or whose queue is paused or limited, or that is enqueued inside the
caller's transaction, is claimed as before; an offer that lapsed is taken by nobody; a job handed
to a worker that did not hear it runs when that worker listens again, or is given back."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _inprocess import job_row, running, wait_state
from psycopg import AsyncConnection
from test_single_job_insert import SPECS, stored

from tenure import Client, JobContext, Tenure
from tenure.db import producer_queries
from tenure.db.channels import notify_channel, offer_channel
from tenure.db.offer_queries import OfferQueries
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

SCHEMA = "tenure"


def app_of(dsn: str, ran: list[int], *, gate: asyncio.Event | None = None) -> Tenure:
    app = Tenure(dsn)

    @app.task(name="t.note")
    async def note(ctx: JobContext, n: int) -> int:
        if gate is not None:
            await gate.wait()
        ran.append(n)
        return n

    return app


async def offer_of(
    db: AsyncConnection[Any], worker: str | None = None, timeout: float = 10
) -> dict[str, Any]:
    """The offer row (of `worker`, or of any worker) once one stands with a slot."""
    deadline = time.monotonic() + timeout
    while True:
        cur = db.cursor(row_factory=psycopg.rows.dict_row)
        await cur.execute(
            "SELECT * FROM tenure.worker_offers WHERE slots > 0 AND until > now() "
            "AND (%(w)s::text IS NULL OR worker = %(w)s)",
            {"w": worker},
        )
        row = await cur.fetchone()
        if row is not None:
            return row
        assert time.monotonic() < deadline, "no offer stood"
        await asyncio.sleep(0.02)


async def ghost_offer(db: AsyncConnection[Any], worker: str, *, stands_for: float = 60.0) -> None:
    """An offer of a worker that is not running (nobody hears its channel)."""
    await OfferQueries(SCHEMA).make(
        db,
        worker=worker,
        channel=offer_channel(SCHEMA, worker),
        queues=["default"],
        tasks=["t.note"],
        lease_seconds=30.0,
        runtime_seconds=3600.0,
        stands_for=stands_for,
    )


async def test_an_idle_worker_is_handed_a_lone_job_in_its_enqueue(dsn: str, db: AsyncConnection[Any]) -> None:
    """The enqueue's own statement takes the idle worker's offer: the job is stored running under
    that worker's lease (attempt 1, token 1), and the worker runs it without claiming it."""
    ran: list[int] = []
    gate = asyncio.Event()
    app = app_of(dsn, ran, gate=gate)
    async with running(app) as worker:
        offer = await offer_of(db)
        assert offer["worker"] == worker.services.owner
        job = await app.enqueue("t.note", {"n": 1})
        assert job.handed
        row = await job_row(db, job.id)
        assert (row["state"], row["lease_owner"], row["lease_token"], row["attempt_count"]) == (
            "running",
            worker.services.owner,
            1,
            1,
        )
        assert row["lease_expires_at"] > row["attempted_at"]
        gate.set()
        done = await wait_state(db, job.id, "succeeded")
        assert done["result"] == 1
        assert worker.stats.handed == 1
        # Heard and started, the worker offers its slot again for the next one.
        await offer_of(db, worker.services.owner)
        second = await app.enqueue("t.note", {"n": 2})
        await wait_state(db, second.id, "succeeded")
        assert worker.stats.handed == 2
    assert ran == [1, 2]


async def test_lone_jobs_in_quick_succession_each_reach_a_worker_that_never_polls(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A handed job notifies its worker, not its queue: the client's wake-up limiter does not
    count it, so the next lone job, moments later, is handed again or notifies its queue, and
    runs at once with the worker's poll a minute away."""
    ran: list[int] = []
    app = app_of(dsn, ran)
    async with running(app, poll_interval=60.0) as worker:
        await offer_of(db)
        jobs = [await app.enqueue("t.note", {"n": n}) for n in range(5)]
        for job in jobs:
            await wait_state(db, job.id, "succeeded", timeout=5)
        assert worker.stats.handed >= 1
    assert sorted(ran) == [0, 1, 2, 3, 4]


async def test_a_job_inside_the_callers_transaction_is_claimed_not_handed(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A job enqueued in the caller's transaction is never handed (its commit is the caller's):
    it goes in pending and is claimed after the commit."""
    ran: list[int] = []
    app = app_of(dsn, ran)
    async with running(app) as worker:
        await offer_of(db)
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            job = await app.enqueue("t.note", {"n": 3}, conn=conn)
            await conn.commit()
        await wait_state(db, job.id, "succeeded")
        assert worker.stats.handed == 0
    assert ran == [3]


@pytest.mark.parametrize("hold", ["paused", "limited", "a job waits before it"])
async def test_a_job_that_must_wait_is_not_handed(dsn: str, db: AsyncConnection[Any], hold: str) -> None:
    """An offer is passed over when its queue is paused or limited, or a due job of the queue is
    pending: the job goes in pending, as it would without the offer."""
    await ghost_offer(db, "ghost")
    if hold == "paused":
        await db.execute(
            "INSERT INTO tenure.queue_pauses (queue, actor, reason) VALUES ('default', 'test', 'paused')"
        )
    elif hold == "limited":
        await db.execute(
            "INSERT INTO tenure.queue_limits (queue, max_running, declared_by) VALUES ('default', 5, 'test')"
        )
    else:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await app_of(dsn, []).enqueue("t.note", {"n": 0}, conn=conn)  # pending: not handed
            await conn.commit()
    app = app_of(dsn, [])
    job = await app.enqueue("t.note", {"n": 4})
    row = await job_row(db, job.id)
    assert (row["state"], row["lease_owner"], row["attempt_count"]) == ("pending", None, 0)
    cur = await db.execute("SELECT slots FROM tenure.worker_offers WHERE worker = 'ghost'")
    assert await cur.fetchone() == (1,)
    await app.close()


async def test_a_lapsed_offer_is_taken_by_nobody(dsn: str, db: AsyncConnection[Any]) -> None:
    """An offer stands for its time only: a worker that stopped renewing it (busy, stopped,
    killed) is handed nothing after that."""
    await ghost_offer(db, "ghost", stands_for=0.05)
    await asyncio.sleep(0.1)
    app = app_of(dsn, [])
    job = await app.enqueue("t.note", {"n": 5})
    assert (await job_row(db, job.id))["state"] == "pending"
    await app.close()


async def test_a_job_handed_unheard_runs_when_its_worker_listens(dsn: str, db: AsyncConnection[Any]) -> None:
    """A job that took an offer while its worker did not listen (its listener reconnecting) is
    found when the listener listens again, and runs in that attempt: no attempt is spent."""
    await ghost_offer(db, "late-listener")
    ran: list[int] = []
    app = app_of(dsn, ran)
    job = await app.enqueue("t.note", {"n": 6})
    assert (await job_row(db, job.id))["lease_owner"] == "late-listener"
    async with running(app, worker_id="late-listener") as worker:
        done = await wait_state(db, job.id, "succeeded")
        assert (done["attempt_count"], done["lease_token"]) == (1, 1)
        assert worker.stats.handed == 1
    assert ran == [6]


async def test_a_stopping_worker_withdraws_its_offer_and_gives_back_a_job_it_did_not_hear(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A worker that stops takes its offer back; a job that took it unheard is given back pending,
    its attempt not counted, for another worker to run."""
    ran: list[int] = []
    app = app_of(dsn, ran)
    async with running(app, worker_id="leaving", poll_interval=30.0) as worker:
        await offer_of(db, "leaving")
        # The worker's listener is stopped first, so that what follows goes unheard.
        assert worker.listener is not None
        worker.listener.offer_channel = "nobody-listens-here"
        await db.execute(
            "UPDATE tenure.worker_offers SET channel = 'nobody-listens-here' WHERE worker = 'leaving'"
        )
        job = await app_of(dsn, []).enqueue("t.note", {"n": 7})
        assert (await job_row(db, job.id))["lease_owner"] == "leaving"
    row = await job_row(db, job.id)
    assert (row["state"], row["attempt_count"], row["lease_owner"]) == ("pending", 0, None)
    cur = await db.execute("SELECT count(*) FROM tenure.worker_offers")
    assert await cur.fetchone() == (0,)
    cur = await db.execute(
        "SELECT event, error_code FROM tenure.job_events WHERE job_id = %s ORDER BY id", (job.id,)
    )
    assert await cur.fetchall() == [("released", "NO_SLOT")]


async def test_a_worker_without_hand_off_makes_no_offer(dsn: str, db: AsyncConnection[Any]) -> None:
    """hand_off=False (or a single slot) keeps the worker to claims."""
    ran: list[int] = []
    app = app_of(dsn, ran)
    async with running(app, hand_off=False) as worker:
        job = await app.enqueue("t.note", {"n": 8})
        await wait_state(db, job.id, "succeeded")
        cur = await db.execute("SELECT count(*) FROM tenure.worker_offers")
        assert await cur.fetchone() == (0,)
        assert worker.stats.handed == 0


async def test_without_an_offer_the_hand_off_insert_is_the_lone_insert(
    dsn: str, db: AsyncConnection[Any], queries: Queries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every due shape of plain job, with no offer standing, job_hand_off stores the row
    job_insert_one stores, says it was not handed, and notifies the job's queue in its commit."""
    monkeypatch.setattr(producer_queries, "NO_OFFER_REST", 0.0)  # every job looks for an offer
    due = [s for s in SPECS if s.run_at is None and not s.delay]
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener,
    ):
        await listener.execute(f'LISTEN "{notify_channel(SCHEMA)}"')
        for spec in due:
            [offered] = await queries.job_insert_many(conn, [spec], hand_off=True)
            [plain] = await queries.job_insert_many(conn, [spec])
            assert not offered.handed and not plain.handed
            assert await stored(db, [offered.id]) == await stored(db, [plain.id]), spec
            heard = [n.payload async for n in listener.notifies(timeout=1.0, stop_after=2)]
            assert heard == [spec.queue or "default"] * 2, spec


async def test_an_offer_lapsed_an_hour_ago_is_deleted_when_another_is_made(
    db: AsyncConnection[Any],
) -> None:
    """A killed worker's offer stays behind; the next offer made by any worker deletes it once it
    lapsed an hour ago, so the enqueue's look-up never reads a growing pile of dead offers."""
    offers = OfferQueries(SCHEMA)
    now = await (await db.execute("SELECT now()")).fetchone()
    assert now is not None
    common: dict[str, Any] = {
        "queues": ["default"],
        "tasks": ["t.note"],
        "lease_seconds": 30.0,
        "runtime_seconds": 3600.0,
        "stands_for": 60.0,
    }
    await offers.make(db, worker="killed", channel="c1", now=now[0] - timedelta(hours=2), **common)
    await offers.make(db, worker="recent", channel="c2", now=now[0] - timedelta(minutes=10), **common)
    await offers.make(db, worker="live", channel="c3", **common)
    cur = await db.execute("SELECT worker FROM tenure.worker_offers ORDER BY worker")
    assert await cur.fetchall() == [("live",), ("recent",)]


async def test_a_job_claimed_but_not_yet_started_is_never_taken_for_an_unheard_hand_off(
    dsn: str, db: AsyncConnection[Any], queries: Queries
) -> None:
    """The look for unheard hand-offs at the listener's connect finds only handed attempts: a job
    this worker's name claimed (and has not started) is left to its claimer, not run a second
    time beside it nor given back."""
    ran: list[int] = []
    app = app_of(dsn, ran)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [job] = await queries.job_insert_many(conn, [JobSpec(task="t.note", payload={"n": 9})])
        [claimed] = await queries.job_claim(
            conn,
            queue="default",
            owner="claims-first",
            limit=1,
            default_lease_seconds=30.0,
            default_runtime_seconds=3600.0,
        )
    assert claimed.id == job.id
    async with running(app, worker_id="claims-first") as worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        await asyncio.sleep(0.3)
        assert worker.stats.handed == 0 and ran == []
    row = await job_row(db, job.id)
    assert (row["state"], row["lease_owner"], row["lease_token"]) == ("running", "claims-first", 1)


async def test_a_worker_whose_claims_fill_its_slots_takes_its_offer_back(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The claim that fills a worker's slots takes its offer back, so that the next lone job goes
    to an idle worker or its queue, not to full slots."""
    ran: list[int] = []
    gate = asyncio.Event()
    app = app_of(dsn, ran, gate=gate)
    async with running(app, concurrency=2) as worker:
        await offer_of(db, worker.services.owner)
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            jobs = [await app.enqueue("t.note", {"n": n}, conn=conn) for n in range(2)]
            await conn.commit()
        for job in jobs:
            await wait_state(db, job.id, "running")
        deadline = time.monotonic() + 5
        while (await (await db.execute("SELECT count(*) FROM tenure.worker_offers")).fetchone()) != (0,):
            assert time.monotonic() < deadline, "the busy worker's offer still stands"
            await asyncio.sleep(0.02)
        late = await app.enqueue("t.note", {"n": 2})
        assert not late.handed
        gate.set()
        await wait_state(db, late.id, "succeeded")
        assert worker.stats.handed == 0


async def test_a_queue_that_found_no_offer_rests_before_looking_again(
    dsn: str, db: AsyncConnection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone job that found no offer spares its queue's next ones the look for NO_OFFER_REST
    (the look costs the insert server time): an offer made meanwhile is taken once it is over."""
    monkeypatch.setattr(producer_queries, "NO_OFFER_REST", 0.3)
    app = app_of(dsn, [])
    assert not (await app.enqueue("t.note", {"n": 1})).handed  # no offer: the queue rests
    await ghost_offer(db, "ghost")
    assert not (await app.enqueue("t.note", {"n": 2})).handed  # resting: not looked for
    await db.execute("DELETE FROM tenure.jobs")  # nothing waits before the next one
    await asyncio.sleep(0.35)
    assert (await app.enqueue("t.note", {"n": 3})).handed
    await app.close()


async def test_a_job_too_large_for_its_notification_is_claimed_not_handed(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A handed job travels in its notification, which PostgreSQL bounds at 8000 bytes: a payload
    past the room for it is not handed (nor does its enqueue fail), and the offer still stands."""
    await ghost_offer(db, "ghost")
    async with Client(dsn) as client:  # no registry: the payload is not checked against the task
        job = await client.enqueue("t.note", {"n": 1, "blob": "x" * 7000}, queue="default")
    assert not job.handed
    assert (await job_row(db, job.id))["state"] == "pending"
    cur = await db.execute("SELECT slots FROM tenure.worker_offers WHERE worker = 'ghost'")
    assert await cur.fetchone() == (1,)

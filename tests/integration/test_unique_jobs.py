"""Unique jobs and idempotent enqueue: the database's unique index keeps one job per key
within its scope, for any number of producers, and the enqueue returns the job that holds it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _inprocess import job_row, running, wait_state
from psycopg import AsyncConnection

import tenure
from tenure import JobContext, JobSpec, Tenure, Unique
from tenure.db.queries import Queries


async def count(db: AsyncConnection[Any], task: str) -> int:
    row = await (await db.execute("SELECT count(*) FROM tenure.jobs WHERE task = %s", (task,))).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_second_enqueue_of_a_held_key_returns_the_first_job_until_it_finishes(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Same key while the first job waits: the same job, marked existing; once it succeeded
    (scope 'active'), the key is free and a new job is stored."""
    app = Tenure(dsn)

    @app.task(name="t.sync_account", unique=Unique(fields=("account",)))
    async def sync_account(ctx: JobContext, account: int) -> None:
        pass

    first = await app.enqueue(sync_account, {"account": 7})
    again = await app.enqueue(sync_account, {"account": 7})
    other = await app.enqueue(sync_account, {"account": 8})
    assert (again.id, again.existing, first.existing) == (first.id, True, False)
    assert other.id != first.id and not other.existing
    assert first.unique_key == again.unique_key == 't.sync_account:{"account":7}'
    async with running(app):
        await wait_state(db, first.id, "succeeded")
    later = await app.enqueue(sync_account, {"account": 7})
    assert not later.existing and later.id != first.id
    assert await count(db, "t.sync_account") == 3
    await app.close()


async def test_scopes_decide_which_states_hold_the_key(dsn: str, db: AsyncConnection[Any]) -> None:
    """'unfinished': a dead job still holds its key; 'active': it does not; a scope that leaves
    out a waiting or the running state, or holds cancelled, is refused at declaration."""
    app = Tenure(dsn)

    @app.task(name="t.fragile", max_attempts=1, unique=Unique(scope="unfinished"))
    async def fragile(ctx: JobContext) -> None:
        raise tenure.Permanent("broken", code="BROKEN")

    @app.task(name="t.brittle", max_attempts=1, unique=Unique())
    async def brittle(ctx: JobContext) -> None:
        raise tenure.Permanent("broken", code="BROKEN")

    kept = await app.enqueue(fragile)
    freed = await app.enqueue(brittle)
    async with running(app):
        await wait_state(db, kept.id, "dead")
        await wait_state(db, freed.id, "dead")
    assert (await app.enqueue(fragile)).id == kept.id, "a dead job holds an 'unfinished' key"
    assert not (await app.enqueue(brittle)).existing, "a dead job holds no 'active' key"
    with pytest.raises(tenure.ConfigurationError, match="must include scheduled, pending and running"):
        Unique(scope=["scheduled", "pending"])
    with pytest.raises(tenure.ConfigurationError, match="may not include cancelled"):
        Unique(scope=["scheduled", "pending", "running", "cancelled"])
    with pytest.raises(tenure.ConfigurationError, match="unknown unique scope"):
        Unique(scope="forever")
    await app.close()


async def test_a_unique_period_allows_one_job_per_window(dsn: str, db: AsyncConnection[Any]) -> None:
    """period=60: enqueues in one minute (database time, injected) share a job, the next minute
    gets its own, even after the first finished."""
    q = Queries("tenure")
    spec = JobSpec(task="t.digest", queue="q", unique=Unique(key="daily", period=60))
    base = (await (await db.execute("SELECT date_trunc('minute', now()) + interval '1 hour'")).fetchone())[0]  # type: ignore[index]
    [a] = await q.job_insert_many(db, [spec], now=base + timedelta(seconds=5))
    [b] = await q.job_insert_many(db, [spec], now=base + timedelta(seconds=50))
    [c] = await q.job_insert_many(db, [spec], now=base + timedelta(seconds=65))
    assert (b.id, b.existing) == (a.id, True)
    assert not c.existing and c.id != a.id


async def test_a_retried_enqueue_with_the_callers_key_returns_the_first_job(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The caller's idempotency key (string or UUID): a second enqueue, as after an ambiguous
    commit, returns the first job, also once it has finished; a batch stores the rest."""
    app = Tenure(dsn)

    @app.task(name="t.charge")
    async def charge(ctx: JobContext, cents: int) -> None:
        pass

    first = await app.enqueue(charge, {"cents": 100}, idempotency_key="order-17")
    async with running(app):
        await wait_state(db, first.id, "succeeded")
    again = await app.enqueue(charge, {"cents": 100}, idempotency_key="order-17")
    assert (again.id, again.existing, again.idempotency_key) == (first.id, True, first.idempotency_key)
    key = uuid.uuid4()
    batch = await app.client.enqueue_many(
        [
            app.client.builder.spec(charge, {"cents": 1}, idempotency_key=key),
            app.client.builder.spec(charge, {"cents": 2}),
            app.client.builder.spec(charge, {"cents": 1}, idempotency_key=key),
        ]
    )
    assert [j.existing for j in batch] == [False, False, True] and batch[0].id == batch[2].id
    assert batch[0].idempotency_key == key
    assert await count(db, "t.charge") == 3
    await app.close()


async def test_keys_nobody_chose_are_generated_and_left_out_of_the_unique_index(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Jobs enqueued one at a time, in a batch, by COPY and by the database's default get
    generated version 8 keys, which the unique index leaves out; a caller's own key is in it."""
    app = Tenure(dsn)
    lone = await app.enqueue("t.k", {}, queue="q")
    batch = await app.client.enqueue_many([app.client.builder.spec("t.k", {}, queue="q") for _ in range(3)])
    await app.client.enqueue_copy([app.client.builder.spec("t.k", {}, queue="q") for _ in range(3)])
    chosen = await app.enqueue("t.k", {}, queue="q", idempotency_key="mine")
    await app.close()
    assert lone.idempotency_key is not None and lone.idempotency_key.version == 8
    assert all(j.idempotency_key is not None and j.idempotency_key.version == 8 for j in batch)
    assert chosen.idempotency_key is not None and chosen.idempotency_key.version == 5
    async with db.cursor() as cur:
        await cur.execute(
            "SELECT substr(idempotency_key::text, 15, 1) AS version, count(*) FROM tenure.jobs "
            "WHERE task = 't.k' GROUP BY 1 ORDER BY 1"
        )
        assert await cur.fetchall() == [("5", 1), ("8", 7)]
        await cur.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'tenure.jobs'::regclass "
            "AND pg_get_indexdef(indexrelid) LIKE '%%(idempotency_key)%%'"
        )
        assert [r[0].split(" WHERE ")[1] for r in await cur.fetchall()] == [
            "(substr((idempotency_key)::text, 15, 1) <> '8'::text)"
        ]


async def test_a_unique_enqueue_in_a_rolled_back_transaction_leaves_the_key_free(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Inside the caller's transaction the job holds its key only if that transaction commits."""
    app = Tenure(dsn)
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction(force_rollback=True):
        await app.enqueue("t.x", {}, queue="q", unique="only-one", conn=conn)
    job = await app.enqueue("t.x", {}, queue="q", unique="only-one")
    assert not job.existing
    await app.close()


async def test_bad_unique_input_is_refused_before_anything_is_written(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A payload without the unique fields, a bad unique value, COPY with unique jobs, a bad
    idempotency key: clear errors, no job stored."""
    app = Tenure(dsn)

    @app.task(name="t.by_user", unique=Unique(fields=("user",)))
    async def by_user(ctx: JobContext, user: int = 0) -> None:
        pass

    with pytest.raises(tenure.ValidationError, match="payload has no 'user'"):
        await app.enqueue(by_user, {})
    with pytest.raises(tenure.ConfigurationError, match=r"unique must be a tenure\.Unique"):
        await app.enqueue(by_user, {"user": 1}, unique=3)
    with pytest.raises(tenure.ValidationError, match="enqueue_copy does not accept unique jobs"):
        await app.client.enqueue_copy([app.client.builder.spec(by_user, {"user": 1})])
    with pytest.raises(tenure.ValidationError, match="idempotency_key must be a UUID or a string"):
        await app.enqueue(by_user, {"user": 1}, idempotency_key="")
    generated = uuid.UUID("00000000-0000-8000-8000-000000000001")
    with pytest.raises(
        tenure.ValidationError, match="is a version 8 UUID, the form of the keys Tenure generates"
    ):
        await app.enqueue(by_user, {"user": 1}, idempotency_key=generated)
    with pytest.raises(tenure.ConfigurationError, match="not a key string"):
        app.task(name="t.bad", unique="one")(by_user)
    assert await count(db, "t.by_user") == 0
    await app.close()


async def test_bringing_back_a_job_whose_key_is_held_is_refused(dsn: str, db: AsyncConnection[Any]) -> None:
    """Retry of a cancelled job while another job holds its unique key: refused, naming the
    cause, and the cancelled job stays cancelled."""
    app = Tenure(dsn)
    old = await app.enqueue("t.y", {}, queue="q", unique="k")
    await app.cancel([old.id], reason="replace it")
    new = await app.enqueue("t.y", {}, queue="q", unique="k")
    assert not new.existing
    with pytest.raises(tenure.ControlRefused, match="unique key another job holds now"):
        await app.retry([old.id], reason="back")
    assert (await job_row(db, old.id))["state"] == "cancelled"
    await app.close()


@pytest.mark.slow
async def test_eight_concurrent_producers_enqueueing_one_key_store_one_job(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """8 producers, each on its own connection, enqueue the same unique key 1,000 times in all:
    exactly one job is stored, and every enqueue returned it."""
    clients = [tenure.Client(dsn) for _ in range(8)]
    spec = JobSpec(task="t.report", queue="q", unique=Unique(key="monthly"))

    async def produce(client: tenure.Client) -> set[int]:
        seen = set()
        for _ in range(125):
            [job] = await client.enqueue_many([spec])
            seen.add(job.id)
        return seen

    try:
        results = await asyncio.gather(*(produce(c) for c in clients))
    finally:
        for c in clients:
            await c.close()
    ids = set().union(*results)
    assert len(ids) == 1 and await count(db, "t.report") == 1

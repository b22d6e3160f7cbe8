"""One bad row costs only itself: a claimed job whose row this client cannot read is set aside
as dead on its own, and the jobs claimed beside it run; the database refuses the values that no
worker could process at all."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from _harness import job_row, states, wait_until

import tenure
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

#: Deeper than Python's JSON decoder can read (its recursion limit, 1,000 by default, which test
#: tools raise by a few thousand at most), inside what jsonb takes (about 14,000 levels).
TOO_DEEP = '{"n": 0, "deep": ' + "[" * 10000 + "]" * 10000 + "}"


async def test_a_claimed_row_that_cannot_be_read_is_set_aside_and_its_batch_is_returned(
    db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """A claim of 5 jobs, one with a payload too deep to decode: the other 4 come back claimed,
    the unreadable one is dead with UNREADABLE_ROW, fenced under its claim's token."""
    jobs = await queries.job_insert_many(db, [JobSpec(task="t", payload={"n": n}) for n in range(4)])
    await db.execute(
        "INSERT INTO tenure.jobs (queue, task, payload) VALUES ('default', 't', %s::jsonb)", (TOO_DEEP,)
    )
    claimed = await queries.job_claim(
        db, queue="default", owner="w", limit=10, default_lease_seconds=30, default_runtime_seconds=60
    )
    assert [c.id for c in claimed] == [j.id for j in jobs]
    cur = await db.execute(
        "SELECT state::text, last_error_code, lease_token FROM tenure.jobs WHERE payload ? 'deep'"
    )
    assert await cur.fetchall() == [("dead", "UNREADABLE_ROW", 1)]


async def test_workers_run_every_job_beside_an_unreadable_one(
    db: psycopg.AsyncConnection[Any], app: tenure.Tenure, start_worker: Any
) -> None:
    """Async and thread handlers' jobs claimed in the same batches as an unreadable row all succeed,
    and the worker's claimer stays healthy."""
    ran: list[str] = []

    @app.task(name="bad.async")
    async def in_loop(ctx: tenure.JobContext, n: int) -> None:
        ran.append(f"a{n}")

    @app.task(name="bad.thread")
    def in_thread(ctx: tenure.JobContext, n: int) -> None:
        ran.append(f"t{n}")

    await db.execute(
        "INSERT INTO tenure.jobs (queue, task, payload) VALUES ('default', 'bad.async', %s::jsonb)",
        (TOO_DEEP,),
    )
    for n in range(10):
        await app.enqueue(in_loop, {"n": n})
        await app.enqueue(in_thread, {"n": n})
    worker = await start_worker(app, lease_seconds=5, concurrency=8, poll_interval=0.05)

    async def all_done() -> dict[str, int] | None:
        found = await states(db)
        return found if found == {"succeeded": 20, "dead": 1} else None

    await wait_until(all_done, timeout=20, what="20 jobs to succeed beside the dead one")
    assert sorted(ran) == sorted([f"a{n}" for n in range(10)] + [f"t{n}" for n in range(10)])
    assert not worker.services.health.service("claimer").failing
    await asyncio.sleep(0)
    cur = await db.execute("SELECT id FROM tenure.jobs WHERE state = 'dead'")
    [(dead_id,)] = await cur.fetchall()
    assert (await job_row(db, dead_id))["last_error_code"] == "UNREADABLE_ROW"


async def test_an_unreadable_job_can_still_be_looked_at(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """The job page, Client.get_job and the blocking client show an unreadable row with its
    payload empty and the reason, instead of failing."""
    from starlette.testclient import TestClient

    from tenure.ops.dashboard import create_app
    from tenure.producer.client import Client
    from tenure.producer.sync_client import SyncClient

    cur = await db.execute(
        "INSERT INTO tenure.jobs (queue, task, payload) VALUES ('default', 't', %s::jsonb) RETURNING id",
        (TOO_DEEP,),
    )
    [(job_id,)] = await cur.fetchall()
    async with Client(dsn, schema="tenure") as client:
        job = await client.get_job(job_id)
    assert job is not None and job.payload == {} and "RecursionError" in (job.unreadable or "")
    with SyncClient(dsn, schema="tenure") as sync_client:
        same = sync_client.get_job(job_id)
    assert same is not None and same.unreadable == job.unreadable
    with TestClient(create_app(dsn, schema="tenure"), base_url="http://127.0.0.1") as browser:
        page = browser.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and "cannot be read here" in page.text

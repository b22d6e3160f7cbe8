"""Global limits: a limited queue never has more running jobs than its limit, per queue
and per key, its starts follow its rate, and a slot is a lease that comes back at expiry."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from _inprocess import running, wait_state
from psycopg import AsyncConnection

import tenure
from tenure import JobContext, Tenure
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec


async def live(db: AsyncConnection[Any], queue: str) -> list[tuple[Any, ...]]:
    cur = await db.execute(
        "SELECT payload->>'customer' FROM tenure.jobs WHERE queue = %s AND state = 'running'"
        " AND lease_expires_at > now()",
        (queue,),
    )
    return await cur.fetchall()


async def test_a_queue_limit_holds_running_jobs_to_it_and_then_drains(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """max_running=2 on a worker with 10 slots: sampled while 8 slow jobs run, never more than 2
    hold a lease; all of them finish."""
    app = Tenure(dsn)
    app.limit("limited", max_running=2)

    @app.task(name="t.slow", queue="limited")
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(0.3)

    ids = [(await app.enqueue(slow)).id for _ in range(8)]
    peak = 0
    async with running(app, concurrency=10):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            peak = max(peak, len(await live(db, "limited")))
            cur = await db.execute("SELECT count(*) FROM tenure.jobs WHERE state = 'succeeded'")
            if (await cur.fetchone()) == (8,):
                break
            await asyncio.sleep(0.02)
        for job_id in ids:
            await wait_state(db, job_id, "succeeded")
    assert peak == 2, peak
    await app.close()


async def claim(db: AsyncConnection[Any], queue: str, *, limited: bool = True, **at: Any) -> list[Any]:
    """A claim of up to 10 jobs of `queue` by worker w (30 s leases)."""
    return await Queries("tenure").job_claim(
        db,
        queue=queue,
        owner="w",
        limit=10,
        default_lease_seconds=30,
        default_runtime_seconds=60,
        limited=limited,
        **at,
    )


async def test_a_per_key_limit_takes_keys_in_turn(dsn: str, db: AsyncConnection[Any]) -> None:
    """max_running_per_key=1 by customer: never two running jobs of one customer; the first
    claim takes one job of each customer before a second of any (round robin)."""
    q = Queries("tenure")
    await db.execute(
        "INSERT INTO tenure.queue_limits (queue, key_field, max_running_per_key, declared_by)"
        " VALUES ('pk', 'customer', 1, 'test')"
    )
    specs = [JobSpec(task="t.k", queue="pk", payload={"customer": c}) for c in "aaaabbc"]
    await q.job_insert_many(db, specs)
    first = await claim(db, "pk")
    assert sorted(j.payload["customer"] for j in first) == ["a", "b", "c"]
    assert await claim(db, "pk") == [], "a customer already running got a second job"
    assert await claim(db, "pk", limited=False) == [], "the plain claim took from a limited queue"
    [done] = [j for j in first if j.payload["customer"] == "a"]
    await q.job_complete_many(db, owner="w", leases=[(done.id, done.lease.token)])
    [next_a] = await claim(db, "pk")
    assert next_a.payload["customer"] == "a"


async def test_a_slot_comes_back_when_its_lease_expires_not_before(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """With max_running=1, a holder that vanished keeps its slot until its lease's expiry (by
    the injected database clock) and not a moment longer, recovery or not."""
    q = Queries("tenure")
    await db.execute(
        "INSERT INTO tenure.queue_limits (queue, max_running, declared_by) VALUES ('one', 1, 'test')"
    )
    await q.job_insert_many(db, [JobSpec(task="t.o", queue="one") for _ in range(2)])
    start = (await (await db.execute("SELECT now()")).fetchone())[0]  # type: ignore[index]

    def at(seconds: float) -> Any:  # the injected database clock, `seconds` after the start
        return {"now": start + timedelta(seconds=seconds)}

    assert len(await claim(db, "one", **at(0))) == 1
    assert await claim(db, "one", **at(29.9)) == [], "a second job ran while the first lease was live"
    assert len(await claim(db, "one", **at(30.1))) == 1, "the expired lease's slot did not come back"


async def test_a_rate_limit_bounds_starts_per_second(dsn: str, db: AsyncConnection[Any]) -> None:
    """rate=5 per second: over 3 s a worker with free slots starts at most 5 at first and 5 a
    second after (a full bucket, then its refill): within 15 and 20."""
    app = Tenure(dsn)
    app.limit("rated", rate=5, per=1.0)

    @app.task(name="t.quick", queue="rated")
    async def quick(ctx: JobContext) -> None:
        pass

    for _ in range(60):
        await app.enqueue(quick)
    async with running(app, concurrency=10, poll_interval=0.02):
        await asyncio.sleep(3.0)
        cur = await db.execute("SELECT count(*) FROM tenure.jobs WHERE attempt_count > 0")
        started = (await cur.fetchone())[0]  # type: ignore[index]
    assert 15 <= started <= 20, started
    await app.close()


def test_bad_limits_are_refused_at_declaration() -> None:
    """Limits that limit nothing, a per-key limit without its field, a bad rate: clear errors."""
    app = Tenure("postgresql://unused")
    with pytest.raises(tenure.ConfigurationError, match="limits nothing"):
        app.limit("q")
    with pytest.raises(tenure.ConfigurationError, match="needs both key="):
        app.limit("q", key="customer")
    with pytest.raises(tenure.ConfigurationError, match="rate must be an integer"):
        app.limit("q", rate=0)
    with pytest.raises(tenure.ConfigurationError, match="per must be a positive number"):
        app.limit("q", rate=3, per=0)

"""X16: waits meet crashes and races. A worker process SIGKILLed before its job's wait began, or
after, loses nothing and doubles nothing: the job waits once, its signal wakes it once, and it
finishes once. A signal, the deadline and an operator's cancel racing over the same waiting jobs
leave each with exactly one ending."""

from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import db_now, job_events, job_row, rows, wait_for_marker, wait_until

import tenure
from tenure.db.queries import Queries
from tenure.db.wait_queries import WaitQueries
from tenure.model.jobs import JobSpec
from tenure.testing import Inline

LEASE = 1.0
TASK = "boundary.wait_for_signal"


async def _state(db: psycopg.AsyncConnection[Any], job_id: int, state: str) -> bool:
    return bool((await job_row(db, job_id))["state"] == state)


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("killed", ["before the wait", "while it waits"])
async def test_x16_a_killed_worker_loses_no_wait_and_doubles_no_signal(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path, killed: str
) -> None:
    """SIGKILL before the wait: the lease expires, another worker runs the job and it waits; SIGKILL
    while it waits: nothing is held, another worker runs it once signalled. Either way the signal
    is delivered once and the job succeeds once, with its payload."""
    before = killed == "before the wait"
    worker_a = spawn_worker("worker-a", lease=LEASE)
    payload = {"marker_dir": str(marker_dir), "key": "x16", "hold_seconds": 60.0 if before else 0.0}
    [job] = await queries.job_insert_many(db, [JobSpec(task=TASK, payload=payload)])
    await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker_a,))
    if not before:
        await wait_until(lambda: _state(db, job.id, "waiting"), timeout=20, what="the job to wait")
    worker_a.crash()
    worker_b = spawn_worker("worker-b", lease=LEASE)
    await wait_until(lambda: _state(db, job.id, "waiting"), timeout=30, what="the job to wait")
    async with tenure.Client(db.info.dsn) as client:
        sent = await client.signal("x16", {"approved": True}, idempotency_key="x16-once")
        again = await client.signal("x16", {"approved": True}, idempotency_key="x16-once")
    assert (sent.outcome, sent.job_id, again.outcome) == ("delivered", job.id, "duplicate")
    await wait_until(lambda: _state(db, job.id, "succeeded"), timeout=30, what="the job to finish")
    stats = worker_b.stop()
    done = await job_row(db, job.id)
    [stored] = await rows(db, "SELECT result FROM tenure.jobs WHERE id = %s", (job.id,))
    assert stored["result"] == {"outcome": "signalled", "payload": {"approved": True}}
    assert done["attempt_count"] == (2 if before else 1), "a wait spent an attempt"
    kinds = [e["event"] for e in await job_events(db, job.id)]
    assert kinds.count("wait") == 1 and kinds.count("signalled") == 1, kinds
    assert ("lease_expired" in kinds) == before, kinds
    delivered = await rows(db, "SELECT job_id FROM tenure.signals")
    assert delivered == [{"job_id": job.id}]
    assert stats["succeeded"] == 1


@pytest.mark.slow
async def _race(dsn: str, keys: list[str], doomed: set[int]) -> None:
    """At once, each on its own connection: a deadline pass past every deadline (in batches of 7,
    so that the signals and the cancels meet it in the middle), a signal to each key, and an
    operator's cancel of each doomed job (one finished first is refused and left as it is). Then
    the recovery pass's sweep and a deadline pass again. Every side connects first and all start
    together: started as each connected, the deadline pass could end every wait while the
    signals' connections were still being made, on a loaded machine."""
    waits = WaitQueries("tenure")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        past = await db_now(db) + timedelta(minutes=5)
    start = asyncio.Barrier(2 + len(keys))

    async def deadline(racing: bool = True) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            if racing:
                await start.wait()
            ended = 1
            while ended:
                ended = (await waits.expire_due(conn, limit=7, now=past)).timed_out

    async def signal(n: int, key: str) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await start.wait()
            await waits.signal(conn, key=key, payload_json=str(n), idempotency_key=None, keep_seconds=60)

    async def cancel() -> None:
        async with tenure.Client(dsn) as client:
            await start.wait()
            for job_id in sorted(doomed):
                with contextlib.suppress(tenure.ControlRefused):
                    await client.cancel([job_id], reason="the race")

    await asyncio.gather(deadline(), cancel(), *(signal(n, key) for n, key in enumerate(keys)))
    # A signal and the deadline that each found the other's rows locked (SKIP LOCKED: both pass
    # over) are matched by the passes that follow, as a worker's next passes would.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await waits.sweep(conn, batch=100)
    await deadline(racing=False)


async def test_x16_signal_deadline_and_cancel_racing_end_each_wait_once(dsn: str) -> None:
    """Forty waiting jobs, then at once: a deadline pass past every deadline, a signal to each, and
    an operator's cancel of a random third, each on its own connection. Each wait ends one way:
    cancelled with its job, timed out, or signalled (the signal delivered to it alone; a signal
    that lost is kept); exactly the third cancelled is cancelled."""
    app = tenure.Tenure(dsn)

    @app.task(name="x16.wait")
    async def wait(ctx: tenure.JobContext, n: int) -> None:
        await ctx.wait_for(f"x16:{n}", timeout=60)

    async with Inline(app) as t:
        jobs = [(await t.perform(wait, n=n)).job.id for n in range(40)]
    rng = random.Random(16)
    doomed = set(rng.sample(jobs, len(jobs) // 3))
    await _race(dsn, [f"x16:{n}" for n in range(40)], doomed)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        ended = await rows(
            db,
            "SELECT j.id, j.state::text AS job, w.state AS wait, "
            "(SELECT count(*) FROM tenure.signals s WHERE s.job_id = j.id) AS delivered, "
            "(SELECT count(*) FROM tenure.signals s WHERE s.key = 'x16:' || (j.payload ->> 'n')) AS sent "
            "FROM tenure.jobs j JOIN tenure.job_waits w ON w.job_id = j.id ORDER BY j.id",
        )
    assert len(ended) == 40
    for r in ended:
        # The wait ended one way; a cancel that came after that ending cancelled a pending job.
        assert r["wait"] in ("cancelled", "timed_out", "signalled"), r
        assert r["delivered"] == (1 if r["wait"] == "signalled" else 0), r
        assert r["job"] == ("cancelled" if r["id"] in doomed else "pending"), r
        assert r["wait"] != "cancelled" or r["job"] == "cancelled", r
        assert r["sent"] == 1, r
    waits_ended = {r["wait"] for r in ended}
    assert len(waits_ended) >= 2, f"the race had one winner only: {waits_ended}"
    await app.close()


async def test_x16_step_conditions_racing_signal_deadline_and_cancel_end_each_step_once(dsn: str) -> None:
    """Forty one-step workflows whose step waits on its condition: even ones run on a signal and
    are cancelled at their deadline, odd ones run at their deadline and are skipped by a signal.
    A deadline pass, a signal to each and an operator's cancel of a random third race. Each
    condition ends one way, and the step's job ends as that way says (a cancel that came after
    cancels what the ending left runnable, and finds a skipped step finished)."""
    app = tenure.Tenure(dsn)

    @app.task(name="x16.step")
    async def step(ctx: tenure.JobContext, n: int) -> None:
        return None

    jobs: dict[int, int] = {}
    for n in range(40):
        wf = tenure.Workflow(f"x16 {n}")
        if n % 2 == 0:
            wf.step(
                step.bind(n=n), name="s", wait_for=tenure.Signalled(f"x16g:{n}"), cancel_if=tenure.Elapsed(60)
            )
        else:
            wf.step(
                step.bind(n=n), name="s", wait_for=tenure.Elapsed(60), skip_if=tenure.Signalled(f"x16g:{n}")
            )
        jobs[n] = (await app.enqueue_workflow(wf)).jobs["s"]
    rng = random.Random(61)
    doomed = set(rng.sample(sorted(jobs.values()), len(jobs) // 3))
    await _race(dsn, [f"x16g:{n}" for n in range(40)], doomed)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        ended = await rows(
            db,
            "SELECT j.id, (j.payload ->> 'n')::int AS n, j.state::text AS job, w.state AS wait, "
            "(SELECT count(*) FROM tenure.signals s WHERE s.job_id = j.id) AS delivered "
            "FROM tenure.jobs j JOIN tenure.job_waits w ON w.job_id = j.id AND w.name = '@step' "
            "ORDER BY j.id",
        )
    assert len(ended) == 40
    for r in ended:
        assert r["wait"] in ("cancelled", "timed_out", "signalled"), r
        assert r["delivered"] == (1 if r["wait"] == "signalled" else 0), r
        runs_on = "signalled" if r["n"] % 2 == 0 else "timed_out"
        if r["wait"] == "cancelled":
            left = "cancelled"  # the operator came first
        elif r["wait"] == runs_on:
            left = "pending"  # runnable, unless the operator's cancel came after
        else:
            left = "cancelled" if r["n"] % 2 == 0 else "succeeded"  # cancelled or skipped by it
        expected = "cancelled" if left == "pending" and r["id"] in doomed else left
        assert r["job"] == expected, r
        assert r["id"] in doomed or r["wait"] != "cancelled", r
    assert len({r["wait"] for r in ended}) >= 2, "the race had one winner only"
    await app.close()

"""The completer stepped pass by pass on a real database with a fake local clock: a pass writes every
queued completion in one fenced statement, a row locked elsewhere costs only itself, and a write that
fails is retried until the job's lease runs out, never longer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from _clock import FakeClock
from psycopg import AsyncConnection

from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.model.jobs import ClaimedJob, JobSpec
from tenure.worker.completer import Completer, CompletionOutcome
from tenure.worker.options import WorkerOptions
from tenure.worker.services import WorkerServices

OWNER = "completer-test"


@pytest.fixture
async def completer(dsn: str, queries: Queries) -> AsyncIterator[Completer]:
    pool = await open_pool(dsn, min_size=1, max_size=2)
    services = WorkerServices(pool=pool, queries=queries, options=WorkerOptions(worker_id=OWNER), dsn=dsn)
    service = Completer(services)
    service.clock = FakeClock()
    yield service
    await pool.close()


async def claimed(db: AsyncConnection[Any], queries: Queries, count: int) -> list[ClaimedJob]:
    await queries.job_insert_many(db, [JobSpec(task="t") for _ in range(count)])
    jobs = await queries.job_claim(
        db, queue="default", owner=OWNER, limit=count, default_lease_seconds=30, default_runtime_seconds=60
    )
    assert len(jobs) == count
    return jobs


def hand_over(completer: Completer, job: ClaimedJob, lease_left: float) -> asyncio.Task[str]:
    """What a finished handler does: gives the completer its job, and waits for the outcome."""
    expires = completer.clock.monotonic() + lease_left
    return asyncio.get_running_loop().create_task(completer.complete(job, expires))


async def states(db: AsyncConnection[Any], jobs: list[ClaimedJob]) -> list[str]:
    cur = await db.execute(
        "SELECT state::text FROM tenure.jobs WHERE id = ANY(%s) ORDER BY id", ([j.id for j in jobs],)
    )
    return [row[0] for row in await cur.fetchall()]


async def test_one_pass_writes_every_queued_completion_and_each_caller_learns_its_own_outcome(
    completer: Completer, db: AsyncConnection[Any], queries: Queries
) -> None:
    """Three completions and a stale one queued before a pass are written by that one pass: the
    three succeed, the stale token is refused by the fence (lost) and its job stays running."""
    jobs = await claimed(db, queries, 4)
    waiting = [hand_over(completer, job, 30) for job in jobs[:3]]
    stale_lease = replace(jobs[3].lease, token=jobs[3].lease.token - 1)
    waiting.append(hand_over(completer, replace(jobs[3], lease=stale_lease), 30))
    await asyncio.sleep(0)
    assert await completer.run_once() == 4
    assert await asyncio.gather(*waiting) == ["done", "done", "done", "lost"]
    assert await states(db, jobs) == ["succeeded", "succeeded", "succeeded", "running"]


async def test_a_row_locked_elsewhere_is_retried_alone_once_its_pause_has_passed(
    completer: Completer, dsn: str, db: AsyncConnection[Any], queries: Queries
) -> None:
    """A job whose row an operator holds FOR UPDATE comes back busy: the rest of its batch is written
    at once, and it is written by the first pass after its pause, once the lock is gone."""
    free, locked = await claimed(db, queries, 2)
    async with await AsyncConnection.connect(dsn) as operator:
        await operator.execute("SELECT 1 FROM tenure.jobs WHERE id = %s FOR UPDATE", (locked.id,))
        waiting = [hand_over(completer, free, 30), hand_over(completer, locked, 30)]
        await asyncio.sleep(0)
        assert await completer.run_once() == 2
        await asyncio.sleep(0)
        assert waiting[0].done() and waiting[0].result() == CompletionOutcome.DONE
        assert not waiting[1].done()
        await operator.rollback()
    completer.clock.advance(1.0)  # type: ignore[attr-defined]
    assert await completer.run_once() == 1
    assert await waiting[1] == CompletionOutcome.DONE
    assert await states(db, [free, locked]) == ["succeeded", "succeeded"]


async def test_a_failing_write_is_retried_while_the_lease_lasts_and_settled_expired_after(
    completer: Completer, db: AsyncConnection[Any], queries: Queries
) -> None:
    """While the server refuses every write to jobs (a trigger raising, a real error), a pass raises;
    a job whose lease ends before the retry is settled EXPIRED at once, the other waits and is
    written by the first pass after writes work again."""
    lasting, ending = await claimed(db, queries, 2)
    await db.execute(
        "CREATE FUNCTION tenure.refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'writes refused'; END $$"
    )
    await db.execute(
        "CREATE TRIGGER refuse BEFORE UPDATE ON tenure.jobs FOR EACH ROW EXECUTE FUNCTION tenure.refuse()"
    )
    waiting = [hand_over(completer, lasting, 30), hand_over(completer, ending, 0.1)]
    await asyncio.sleep(0)
    with pytest.raises(psycopg.errors.RaiseException):
        await completer.run_once()
    await asyncio.sleep(0)
    assert waiting[1].done() and waiting[1].result() == CompletionOutcome.EXPIRED
    assert not waiting[0].done()
    await db.execute("DROP TRIGGER refuse ON tenure.jobs")
    completer.clock.advance(1.0)  # type: ignore[attr-defined]
    assert await completer.run_once() == 1
    assert await waiting[0] == CompletionOutcome.DONE
    assert await states(db, [lasting, ending]) == ["succeeded", "running"]

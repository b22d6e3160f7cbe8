"""The completer stepped pass by pass on a real database with a fake local clock: a pass writes every
queued completion in one fenced statement, a row locked elsewhere costs only itself, and a write that
fails is retried until the job's lease runs out, never longer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
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
    stale_lease = jobs[3].lease._replace(token=jobs[3].lease.token - 1)
    waiting.append(hand_over(completer, jobs[3]._replace(lease=stale_lease), 30))
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
    """While the server refuses every write to jobs (read-only, as a standby after a failover; raised
    by a trigger), a pass raises;
    a job whose lease ends before the retry is settled EXPIRED at once, the other waits and is
    written by the first pass after writes work again."""
    lasting, ending = await claimed(db, queries, 2)
    await db.execute(
        "CREATE FUNCTION tenure.refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'writes refused' USING ERRCODE = 'read_only_sql_transaction'; END $$"
    )
    await db.execute(
        "CREATE TRIGGER refuse BEFORE UPDATE ON tenure.jobs FOR EACH ROW EXECUTE FUNCTION tenure.refuse()"
    )
    waiting = [hand_over(completer, lasting, 30), hand_over(completer, ending, 0.1)]
    await asyncio.sleep(0)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        await completer.run_once()
    await asyncio.sleep(0)
    assert waiting[1].done() and waiting[1].result() == CompletionOutcome.EXPIRED
    assert not waiting[0].done()
    await db.execute("DROP TRIGGER refuse ON tenure.jobs")
    completer.clock.advance(1.0)  # type: ignore[attr-defined]
    assert await completer.run_once() == 1
    assert await waiting[0] == CompletionOutcome.DONE
    assert await states(db, [lasting, ending]) == ["succeeded", "running"]


async def refuse_completion_of(db: AsyncConnection[Any], job_id: int) -> None:
    """A trigger that raises when this one job succeeds: a completion the database refuses."""
    await db.execute(
        "CREATE FUNCTION public.refuse_completion() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'job % may not succeed', NEW.id; END $$"
    )
    await db.execute(
        "CREATE TRIGGER refuse_one AFTER UPDATE OF state ON tenure.jobs FOR EACH ROW "
        f"WHEN (NEW.state = 'succeeded' AND NEW.id = {int(job_id)}) "
        "EXECUTE FUNCTION public.refuse_completion()"
    )


async def test_a_completion_the_database_refuses_costs_only_itself(
    completer: Completer, db: AsyncConnection[Any], queries: Queries
) -> None:
    """A batch of 7 whose one row a trigger refuses: the 6 others succeed in the same pass, the
    refused one's caller gets CompletionRejected with the database's message, and the completer
    stays healthy."""
    from tenure.worker.completer import CompletionRejected

    jobs = await claimed(db, queries, 7)
    await refuse_completion_of(db, jobs[3].id)
    waiting = [hand_over(completer, job, lease_left=30) for job in jobs]
    await asyncio.sleep(0)
    assert await completer.run_once() == 7
    await asyncio.sleep(0)
    for n, task in enumerate(waiting):
        if n == 3:
            with pytest.raises(CompletionRejected, match=f"job {jobs[3].id} may not succeed"):
                task.result()
        else:
            assert task.result() == CompletionOutcome.DONE
    assert await states(db, jobs) == ["succeeded"] * 3 + ["running"] + ["succeeded"] * 3
    assert not completer.health.failing


async def test_a_row_whose_completion_waits_out_its_lock_is_tried_again_alone(
    completer: Completer, db: AsyncConnection[Any], dsn: str, queries: Queries
) -> None:
    """A batch whose one row's completion fails on a lock wait that ran out (55P03): the others
    succeed in that pass, that one is tried again by itself and succeeds once the lock is gone,
    and the completer stays healthy."""
    jobs = await claimed(db, queries, 4)
    await db.execute(
        "CREATE FUNCTION public.wait_briefly() RETURNS trigger LANGUAGE plpgsql "
        "SET lock_timeout = '100ms' AS "
        "$$ BEGIN PERFORM 1 FROM public.blocker FOR UPDATE; RETURN NULL; END $$"
    )
    await db.execute("CREATE TABLE public.blocker (n int)")
    await db.execute("INSERT INTO public.blocker VALUES (1)")
    await db.execute(
        "CREATE TRIGGER wait_one AFTER UPDATE OF state ON tenure.jobs FOR EACH ROW "
        f"WHEN (NEW.state = 'succeeded' AND NEW.id = {jobs[1].id}) EXECUTE FUNCTION public.wait_briefly()"
    )
    async with await AsyncConnection.connect(dsn) as holder:
        await holder.execute("SELECT * FROM public.blocker FOR UPDATE")
        waiting = [hand_over(completer, job, lease_left=30) for job in jobs]
        await asyncio.sleep(0)
        assert await completer.run_once() == 4
        await asyncio.sleep(0)
        assert [t.done() for t in waiting] == [True, False, True, True]
        await holder.rollback()
    completer.clock.advance(1.0)  # type: ignore[attr-defined]
    assert await completer.run_once() == 1
    await asyncio.sleep(0)
    assert waiting[1].result() == CompletionOutcome.DONE
    assert await states(db, jobs) == ["succeeded"] * 4
    assert not completer.health.failing


async def test_each_handed_over_completion_is_told_its_outcome_once_and_a_failing_listener_costs_only_itself(
    completer: Completer, db: AsyncConnection[Any], queries: Queries
) -> None:
    """complete_soon (how the executor hands a success over): each job's listener is called once,
    from the completer's pass, with its outcome; one that raises keeps no other from its own."""
    jobs = await claimed(db, queries, 3)
    told: list[tuple[int, str, Any]] = []

    def listener(n: int) -> Any:
        def settled(outcome: str, rejected: Any) -> None:
            told.append((n, outcome, rejected))
            if n == 0:
                raise RuntimeError("this listener is broken")

        return settled

    for n, job in enumerate(jobs):
        completer.complete_soon(job, completer.clock.monotonic() + 30, None, listener(n))
    assert await completer.run_once() == 3
    assert sorted(told) == [(n, CompletionOutcome.DONE, None) for n in range(3)]
    await completer.drain()
    assert len(told) == 3
    assert await states(db, jobs) == ["succeeded"] * 3
    assert not completer.health.failing

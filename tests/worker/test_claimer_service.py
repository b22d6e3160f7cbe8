"""The claimer stepped pass by pass on a real database with a fake local clock: a pass claims only
into free slots and says how many it took, a slot frees when its handler returns (before its
completion is written) and is filled by the next pass, at most `concurrency` completions wait at
once, no pass claims while completions cannot be written, and a job stopped before its task first
ran still gives its slot back."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from _clock import FakeClock
from psycopg import AsyncConnection

from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.handler.context import JobContext
from tenure.model.jobs import JobSpec
from tenure.tasks import TaskRegistry
from tenure.worker.claimer import Claimer
from tenure.worker.completer import Completer
from tenure.worker.executor import Executor
from tenure.worker.options import WorkerOptions
from tenure.worker.services import WorkerServices

SLOTS = 3


@dataclass
class Stepped:
    claimer: Claimer
    completer: Completer
    release: asyncio.Event


@pytest.fixture
async def stepped(dsn: str, queries: Queries) -> AsyncIterator[Stepped]:
    async with stepped_claimer(dsn, queries, SLOTS) as made:
        yield made


@pytest.fixture
async def wide(dsn: str, queries: Queries) -> AsyncIterator[Stepped]:
    """A claimer with more slots than oldest_every (10): a claim of all of them asks for an
    oldest share."""
    async with stepped_claimer(dsn, queries, 20) as made:
        yield made


@contextlib.asynccontextmanager
async def stepped_claimer(dsn: str, queries: Queries, slots: int) -> AsyncIterator[Stepped]:
    release = asyncio.Event()

    async def held(ctx: JobContext) -> None:
        await release.wait()

    registry = TaskRegistry()
    registry.register(held, name="held")
    pool = await open_pool(dsn, min_size=1, max_size=4)
    options = WorkerOptions(worker_id="claimer-test", concurrency=slots, claim_batch=slots)
    services = WorkerServices(pool=pool, queries=queries, options=options, dsn=dsn)
    threads = ThreadPoolExecutor(max_workers=1)
    completer = Completer(services)
    claimer = Claimer(services, Executor(services, registry, completer, threads), ["default"])
    claimer.clock = completer.clock = FakeClock()
    yield Stepped(claimer, completer, release)
    release.set()
    for execution in list(claimer.executor.running.values()):
        if execution.task is not None:
            execution.task.cancel()
    threads.shutdown()
    await pool.close()


async def until_handlers_return(executor: Executor) -> None:
    """Lets the event loop run until no handler's code is running (a few turns of the loop)."""
    for _ in range(10_000):
        if not executor.busy:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{executor.busy} handlers did not return")


async def running(db: AsyncConnection[Any]) -> int:
    row = await (await db.execute("SELECT count(*) FROM tenure.jobs WHERE state = 'running'")).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_pass_claims_only_into_free_slots_and_the_next_fills_the_slots_freed(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """Five jobs, three slots: the first pass claims three, a pass with no free slot claims none,
    and once the three finish and their completions are written the next pass claims the last two."""
    await queries.job_insert_many(db, [JobSpec(task="held") for _ in range(5)])
    assert await stepped.claimer.run_once() == SLOTS
    assert await running(db) == SLOTS
    assert await stepped.claimer.run_once() == 0
    stepped.release.set()
    async with asyncio.timeout(10):
        written = 0
        while written < SLOTS:  # a pass waits for the completions that have not arrived yet
            written += await stepped.completer.run_once()
        # Each slot frees when its execution ends, once its outcome is known.
        await asyncio.gather(*(e.task for e in stepped.claimer.executor.running.values() if e.task))
    assert await running(db) == 0
    assert await stepped.claimer.run_once() == 2
    assert await running(db) == 2


async def test_a_slot_frees_when_its_handler_returns_and_the_next_claim_overlaps_its_completion(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """With three handlers returned and their completions not yet written, the next pass claims
    three more: the claim overlaps the writes. With those three returned too, no pass claims
    again until completions are written: at most `concurrency` of them wait at once."""
    await queries.job_insert_many(db, [JobSpec(task="held") for _ in range(9)])
    assert await stepped.claimer.run_once() == SLOTS
    stepped.release.set()
    executor = stepped.claimer.executor
    await until_handlers_return(executor)  # nothing writes their completions yet
    assert len(executor.running) == SLOTS  # still watched: their outcomes are not written
    assert await stepped.claimer.run_once() == SLOTS
    await until_handlers_return(executor)
    assert len(executor.running) == 2 * SLOTS
    assert await stepped.claimer.run_once() == 0  # the bound: `concurrency` writes waiting
    assert await running(db) == 2 * SLOTS
    async with asyncio.timeout(10):
        written = 0
        while written < 2 * SLOTS:
            written += await stepped.completer.run_once()
    await asyncio.gather(*(e.task for e in executor.running.values() if e.task))
    assert await stepped.claimer.run_once() == SLOTS
    assert await running(db) == SLOTS


async def test_no_pass_claims_while_completions_cannot_be_written(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """While the completer is failing, a pass claims nothing (a job run now would lose its result);
    the first pass after the completer recovers claims again."""
    await queries.job_insert_many(db, [JobSpec(task="held")])
    stepped.completer.health.failed(ConnectionError("server gone"))
    assert await stepped.claimer.run_once() == 0
    assert await running(db) == 0
    stepped.completer.health.succeeded()
    assert await stepped.claimer.run_once() == 1
    assert await running(db) == 1


async def test_a_job_stopped_before_its_task_first_runs_still_gives_its_slot_back(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """Jobs stopped in the same turn of the loop that claimed them (their tasks cancelled before
    their first step, so their work never begins) still free their slots and leave the running
    set, and their never-begun work is closed, not left to warn that it was never awaited."""
    await queries.job_insert_many(db, [JobSpec(task="held") for _ in range(SLOTS)])
    executor = stepped.claimer.executor
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert await stepped.claimer.run_once() == SLOTS
        for execution in list(executor.running.values()):
            executor.stop_for_shutdown(execution)
        for _ in range(10_000):  # a few turns of the loop
            if not executor.running:
                break
            await asyncio.sleep(0)
        gc.collect()
    assert not executor.running
    assert executor.busy == 0
    assert stepped.claimer.free_slots() == SLOTS
    assert not [w for w in caught if "never awaited" in str(w.message)]


async def test_a_claim_that_emptied_its_queue_holds_the_next_for_the_trickle_gap(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """A claim that found fewer jobs than it asked for makes the next wait the trickle gap from its
    start, and that one takes together what arrived meanwhile; a claim that found nothing holds
    back none, and a gap of 0 claims at once."""
    claimer, clock = stepped.claimer, stepped.claimer.clock
    assert isinstance(clock, FakeClock)
    stepped.release.set()
    await queries.job_insert_many(db, [JobSpec(task="held")])
    assert await claimer.run_once() == 1  # asked for three: the queue emptied
    await queries.job_insert_many(db, [JobSpec(task="held") for _ in range(2)])
    await until_handlers_return(claimer.executor)
    assert await claimer.run_once() == 2  # both, after the gap
    assert clock.slept == [WorkerOptions().trickle_gap]
    clock.advance(1.0)
    assert await claimer.run_once() == 0  # found nothing: the worker is idle
    await queries.job_insert_many(db, [JobSpec(task="held")])
    assert await claimer.run_once() == 1  # at once
    assert clock.slept == [WorkerOptions().trickle_gap]
    claimer.services.options.trickle_gap = 0.0
    clock.advance(1.0)
    for _ in range(2):  # each claim empties the queue, and the next goes at once
        async with asyncio.timeout(10):
            while claimer.executor.running:  # room for the claim: completions written
                await stepped.completer.run_once()
        await queries.job_insert_many(db, [JobSpec(task="held")])
        assert await claimer.run_once() == 1
    assert clock.slept == [WorkerOptions().trickle_gap]


async def test_an_idle_worker_s_notification_is_answered_with_its_claim_and_a_busy_one_s_is_not(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """Idle, a notification is answered with the claim pass itself (the listener runs it at once),
    which says how many jobs it took and only then sets the follow-up claim's timer; nothing is
    left for the claim loop. With a job running, it only schedules the refill."""
    claimer = stepped.claimer
    await queries.job_insert_many(db, [JobSpec(task="held")])
    claim = claimer.notified()
    assert claim is not None and not claimer._wake.is_set()
    assert claimer._follow_up is None  # not yet: a timer made first delayed the claim
    assert await claim == 1
    assert claimer._follow_up is not None
    assert await running(db) == 1 and claimer.executor.busy == 1
    await queries.job_insert_many(db, [JobSpec(task="held")])
    assert claimer.notified() is None  # busy: the next refill takes it
    assert await running(db) == 1


async def test_a_notification_s_claim_waits_its_turn_and_none_runs_once_the_claimer_stopped(
    stepped: Stepped, db: AsyncConnection[Any], queries: Queries
) -> None:
    """While a pass is under way a notification only wakes the claim loop (the two never claim at
    once); once the claimer has stopped, a notification claims nothing, and a pass begun
    before the stop ends before the claimer's connection goes back."""
    claimer = stepped.claimer
    await queries.job_insert_many(db, [JobSpec(task="held")])
    async with claimer._passing:
        assert claimer.notified() is None
        assert claimer._wake.is_set()
    claimer._wake.clear()
    claim = claimer.notified()
    assert claim is not None
    pass_under_way = asyncio.ensure_future(claim)
    await asyncio.sleep(0)  # the pass holds the turn, its claim in flight
    await claimer.stopped()
    assert await running(db) == 1  # its claim was done before the stop gave the connection back
    assert await pass_under_way == 1  # (then it lets the job start, and ends)
    await queries.job_insert_many(db, [JobSpec(task="held")])
    assert claimer.notified() is None
    assert await claimer.run_once() == 0  # stopped: no pass claims any more
    assert await running(db) == 1


async def test_an_idle_worker_claims_what_arrives_with_one_lane_and_keeps_the_oldest_share(
    wide: Stepped, db: AsyncConnection[Any], queries: Queries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that found its queue empty claims what arrives next for at most the jobs before
    its next oldest one: a claim that asks for no oldest share (the by-priority lane alone),
    where a claim of its free slots would ask for two. Every job keeps its place in the count:
    the claim that reaches the tenth job takes the queue's oldest, a low-priority job that eight
    higher ones passed."""
    claimer = wide.claimer
    claims: list[tuple[int, int, int]] = []  # (jobs asked for, oldest share asked for, jobs taken)
    claim = queries.job_claim

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        jobs = await claim(*args, **kwargs)
        claims.append((kwargs["limit"], kwargs["oldest"], len(jobs)))
        return jobs

    monkeypatch.setattr(queries, "job_claim", recorded)
    assert await claimer.run_once() == 0
    await queries.job_insert_many(db, [JobSpec(task="held")])
    assert await claimer.run_once() == 1
    await queries.job_insert_many(db, [JobSpec(task="held", priority=-5)])
    (oldest,) = [
        r[0]
        for r in await (await db.execute("SELECT id FROM tenure.jobs WHERE state = 'pending'")).fetchall()
    ]
    await queries.job_insert_many(db, [JobSpec(task="held", priority=5) for _ in range(20)])
    assert await claimer.run_once() == 8
    assert await job_state(db, oldest) == "pending"  # passed by the eight, within the share
    assert await claimer.run_once() == 11
    assert await job_state(db, oldest) == "running"  # the tenth job claimed is the oldest
    assert claims == [(20, 2, 0), (9, 0, 1), (8, 0, 8), (11, 2, 11)]
    assert claimer.oldest_share.claimed["default"] == 20


async def job_state(db: AsyncConnection[Any], job_id: int) -> str:
    row = await (await db.execute("SELECT state::text FROM tenure.jobs WHERE id = %s", (job_id,))).fetchone()
    assert row is not None
    return str(row[0])

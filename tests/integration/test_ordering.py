"""Per-key ordering across connections and workers: concurrent enqueues of one key, keys refused
before anything is written, workers that never run two jobs of a key at once, and a head brought
back while a later job's claim is open. The claim statement's own rules are in tests/db."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from psycopg import AsyncConnection

import tenure
from _ordering import claim, complete, enqueue, state
from tenure import JobSpec, WorkerOptions
from tenure.db.control_queries import ControlQueries
from tenure.db.queries import Queries
from tenure.model.errors import ValidationError


async def test_concurrent_enqueues_of_one_key_get_ids_in_commit_order(dsn: str, queries: Queries) -> None:
    """A second enqueue of a key waits for the first's transaction, so ids follow commit order."""
    async with (
        await AsyncConnection.connect(dsn) as first,
        await AsyncConnection.connect(dsn) as second,
        await AsyncConnection.connect(dsn, autocommit=True) as watch,
    ):
        [early] = await queries.job_insert_many(first, [JobSpec(task="t", ordering_key="k")])
        pid = second.info.backend_pid
        racing = asyncio.create_task(queries.job_insert_many(second, [JobSpec(task="t", ordering_key="k")]))
        for _ in range(500):
            waits = await (
                await watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s",
                    (pid,),
                )
            ).fetchone()
            if waits == (1,):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the second enqueue of the key never waited for the first")
        other = await queries.job_insert_many(watch, [JobSpec(task="t", ordering_key="other")])
        assert other  # other keys do not wait
        await first.commit()
        [late] = await racing
        await second.commit()
        assert early.id < late.id


async def test_bad_ordering_keys_are_refused_before_anything_is_written(
    db: AsyncConnection[Any], dsn: str
) -> None:
    """Empty or overlong keys, and keyed jobs through COPY, are refused with the fix named."""
    app = tenure.Tenure(dsn)
    try:
        for key, needle in (("", "ordering_key"), ("x" * 201, "ordering_key")):
            try:
                await app.enqueue("t", {}, queue="default", ordering_key=key)
            except ValidationError as exc:
                assert needle in str(exc)
            else:
                raise AssertionError(f"ordering_key {key!r} was accepted")
        try:
            await app.client.enqueue_copy([JobSpec(task="t", queue="default", ordering_key="k")])
        except ValidationError as exc:
            assert "enqueue_many" in str(exc)
        else:
            raise AssertionError("enqueue_copy accepted an ordering key")
    finally:
        await app.close()
    assert await (await db.execute("SELECT count(*) FROM tenure.jobs")).fetchone() == (0,)


async def test_workers_never_run_two_jobs_of_a_key_at_once_and_keep_their_order(dsn: str) -> None:
    """Two workers with 8 slots each run 3 keys x 15 jobs: one at a time per key, in enqueue order."""
    app = tenure.Tenure(dsn)
    active: dict[str, int] = {}
    seen: dict[str, list[int]] = {}
    violations: list[str] = []

    @app.task(name="ordered.step")
    async def step(ctx: tenure.JobContext, key: str, seq: int) -> None:
        active[key] = active.get(key, 0) + 1
        if active[key] > 1:
            violations.append(f"{key} ran {active[key]} at once at seq {seq}")
        seen.setdefault(key, []).append(seq)
        await asyncio.sleep(0.003)
        active[key] -= 1

    specs = [
        JobSpec(task="ordered.step", payload={"key": k, "seq": i}, ordering_key=k)
        for i in range(15)
        for k in ("a", "b", "c")
    ]
    unkeyed = [JobSpec(task="ordered.step", payload={"key": f"u{i}", "seq": 0}) for i in range(10)]
    await app.client.enqueue_many(specs + unkeyed)
    options = WorkerOptions(concurrency=8, poll_interval=0.02)
    workers = [app.worker(options), app.worker(WorkerOptions(**{**options.__dict__, "worker_id": "w2"}))]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as db:
            for _ in range(1000):
                row = await (
                    await db.execute("SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded'")
                ).fetchone()
                if row == (0,):
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the ordered jobs did not all finish")
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks)
        await app.close()
    assert violations == []
    assert {k: seen[k] for k in "abc"} == {k: list(range(15)) for k in "abc"}


async def test_a_cancelled_head_brought_back_during_a_later_jobs_claim_waits_for_it(
    dsn: str, db: AsyncConnection[Any], queries: Queries
) -> None:
    """A key's head is cancelled and the next job's claim has run but not committed; bringing the
    head back (retry) waits for that claim, and the head then stays behind the job now running:
    never two running jobs of one key."""
    control = ControlQueries("tenure")
    head, follower, third = await enqueue(db, queries, "k", "k", "k")
    await db.execute("UPDATE tenure.jobs SET state = 'cancelled', finished_at = now() WHERE id = %s", (head,))
    async with await AsyncConnection.connect(dsn) as slow:
        assert await claim(slow, queries, limit=1) == [follower]  # in a transaction, not committed
        waiting = asyncio.ensure_future(
            control.retry_many(db, [head], attempts=1, actor="ops", reason="again")
        )
        await asyncio.sleep(0.3)
        assert not waiting.done(), "brought back without waiting for the claim of its key"
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await db.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        await slow.commit()
    retried = await control.retry_many(db, [head], attempts=1, actor="ops", reason="try again")
    assert [r.id for r in retried.moved] == [head]
    assert await claim(db, queries) == []  # the follower runs: the head waits behind it
    assert {await state(db, i) for i in (head, follower, third)} == {"pending", "running"}
    await complete(db, queries, follower)
    assert await claim(db, queries) == [head]

"""The in-process worker: retries and classification, transactional completion with a
fence, graceful shutdown, sync handlers, bounded batch claims and concurrent lease recovery."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

from _inprocess import FAST, events, job_row, running, wait_state
from psycopg import AsyncConnection

import tenure
from tenure import Backoff, FailureClass, FailurePolicy, JobContext, JobSpec, Tenure, WorkerOptions
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.worker.recovery import Recovery
from tenure.worker.services import WorkerServices

# -- retries and classification -------------------------------------------------------------------


async def test_transient_failures_retry_with_backoff_then_succeed(dsn: str, db: AsyncConnection[Any]) -> None:
    """Two transient failures are retried after the backoff each (scheduled while it runs), with one
    idempotency key, then succeed."""
    app = Tenure(dsn)
    seen: list[tuple[int, int, Any, float]] = []

    @app.task(name="flaky", backoff=Backoff(base=0.2, cap=1.0, jitter=0.0))
    async def flaky(ctx: JobContext, n: int) -> None:
        seen.append((ctx.attempt, ctx.token, ctx.idempotency_key, time.monotonic()))
        if ctx.attempt < 3:
            raise tenure.Transient("upstream timed out")

    job = await app.enqueue(flaky, {"n": 1})
    async with running(app):
        row = await wait_state(db, job.id, "succeeded")
    assert row["attempt_count"] == 3 and row["lease_token"] == 3
    assert [(a, t) for a, t, _, _ in seen] == [(1, 1), (2, 2), (3, 3)]
    assert {k for _, _, k, _ in seen} == {job.idempotency_key}
    gaps = [seen[i + 1][3] - seen[i][3] for i in range(2)]
    assert gaps[0] >= 0.2 - 0.02 and gaps[1] >= 0.4 - 0.02, gaps
    assert [(e[0], e[2], e[4]) for e in await events(db, job.id)] == [
        ("retry", "scheduled", "TRANSIENT"),
        ("retry", "scheduled", "TRANSIENT"),
    ]


async def test_permanent_failures_are_dead_at_once(dsn: str, db: AsyncConnection[Any]) -> None:
    """Permanent errors and payloads that do not fit the handler are dead after one attempt."""
    app = Tenure(dsn)
    calls: list[str] = []

    @app.task(name="strict", max_attempts=20)
    async def strict(ctx: JobContext, version: int) -> None:
        calls.append(f"strict:{version}")
        raise tenure.Permanent(f"unsupported version {version}", code="BAD_VERSION")

    permanent = await app.enqueue(strict, {"version": 9})
    # A producer without the registry cannot check the signature, so the worker must.
    async with tenure.Client(dsn) as producer:
        misfit = await producer.enqueue("strict", {"versoin": 9}, queue="default", max_attempts=20)
    async with running(app):
        dead = await wait_state(db, permanent.id, "dead")
        bad = await wait_state(db, misfit.id, "dead")
    assert dead["attempt_count"] == 1 and dead["last_error_code"] == "BAD_VERSION"
    assert "[permanent]" in dead["last_error"] and "unsupported version 9" in dead["last_error"]
    assert bad["attempt_count"] == 1 and bad["last_error_code"] == "BAD_PAYLOAD"
    assert "missing a required argument: 'version'" in bad["last_error"]
    assert calls == ["strict:9"]
    assert [e[0] for e in await events(db, misfit.id)] == ["dead"]


async def test_unknown_exceptions_use_the_small_unknown_budget(dsn: str, db: AsyncConnection[Any]) -> None:
    """Unknown exceptions get only unknown_budget attempts (default 3), traceback kept."""
    app = Tenure(dsn)

    @app.task(name="buggy", max_attempts=20, backoff=FAST)
    async def buggy(ctx: JobContext) -> None:
        raise ValueError("boom")

    @app.task(name="buggy2", max_attempts=20, backoff=FAST, failure=FailurePolicy(unknown_budget=2))
    async def buggy2(ctx: JobContext) -> None:
        raise ValueError("boom")

    default_budget = await app.enqueue(buggy)
    small_budget = await app.enqueue(buggy2)
    async with running(app):
        a = await wait_state(db, default_budget.id, "dead")
        b = await wait_state(db, small_budget.id, "dead")
    assert a["attempt_count"] == 3 and b["attempt_count"] == 2
    assert a["last_error_code"] == "ValueError"
    assert (
        "[unknown]" in a["last_error"]
        and "ValueError: boom" in a["last_error"]
        and "Traceback" in a["last_error"]
    )
    assert [e[0] for e in await events(db, default_budget.id)] == ["retry", "retry", "dead"]


async def test_classification_is_extensible_per_task(dsn: str, db: AsyncConnection[Any]) -> None:
    """A task's classifiers make one error permanent and another transient past the unknown budget."""
    app = Tenure(dsn)

    def classify(exc: BaseException) -> FailureClass | None:
        if isinstance(exc, KeyError):
            return FailureClass.PERMANENT
        if "rate limited" in str(exc):
            return FailureClass.TRANSIENT
        return None

    policy = FailurePolicy(classifiers=[classify])

    @app.task(name="custom", max_attempts=20, backoff=FAST, failure=policy)
    async def custom(ctx: JobContext, mode: str) -> None:
        if mode == "missing":
            raise KeyError("customer")
        if ctx.attempt <= 4:
            raise RuntimeError("rate limited by upstream")

    missing = await app.enqueue(custom, {"mode": "missing"})
    limited = await app.enqueue(custom, {"mode": "limited"})
    async with running(app):
        m = await wait_state(db, missing.id, "dead")
        ok = await wait_state(db, limited.id, "succeeded")
    assert m["attempt_count"] == 1 and m["last_error"].startswith("[permanent]")
    assert ok["attempt_count"] == 5  # past the unknown budget of 3: classified transient


async def test_transient_database_errors_are_retried_past_the_unknown_budget(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Real 40001/40P01 errors from a handler are transient: retried past the unknown budget."""
    app = Tenure(dsn)

    @app.task(name="dbwork", max_attempts=10, backoff=FAST)
    async def dbwork(ctx: JobContext) -> None:
        if ctx.attempt <= 4:
            code = "40001" if ctx.attempt % 2 else "40P01"
            async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute(
                    f"DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '{code}'; END $$"
                )

    job = await app.enqueue(dbwork)
    async with running(app):
        row = await wait_state(db, job.id, "succeeded")
    assert row["attempt_count"] == 5
    assert [e[4] for e in await events(db, job.id)] == [
        "SQLSTATE_40001",
        "SQLSTATE_40P01",
        "SQLSTATE_40001",
        "SQLSTATE_40P01",
    ]


async def test_a_worker_leaves_jobs_of_tasks_it_does_not_have(dsn: str, db: AsyncConnection[Any]) -> None:
    """A job of a task this worker has not registered is never claimed by it: it stays pending with
    no attempt spent (no UNKNOWN_TASK), while the worker's own jobs on the same queue run."""
    app = Tenure(dsn)

    @app.task(name="known")
    async def known(ctx: JobContext) -> None: ...

    stranger = await app.enqueue("not.registered", {}, queue="default", max_attempts=2)
    mine = await app.enqueue(known)
    async with running(app):
        await wait_state(db, mine.id, "succeeded")
        await asyncio.sleep(0.3)  # many poll intervals: every claim passed the stranger by
        row = await job_row(db, stranger.id)
    assert (row["state"], row["attempt_count"], row["lease_token"]) == ("pending", 0, 0)
    assert await events(db, stranger.id) == []


# -- transactional completion ---------------------------------------------------------------------

SIDE_TABLE = "CREATE TABLE side (job_id bigint, token bigint, note text)"


async def test_atomic_commits_handler_writes_with_completion(dsn: str, db: AsyncConnection[Any]) -> None:
    """ctx.atomic writes the handler's rows and the fenced completion in one transaction."""
    await db.execute(SIDE_TABLE)
    app = Tenure(dsn)

    @app.task(name="ledger")
    async def ledger(ctx: JobContext, note: str) -> str:
        async def work(tx: tenure.AsyncTransaction) -> str:
            await tx.execute("INSERT INTO side VALUES (%s, %s, %s)", (ctx.job_id, ctx.token, note))
            return note

        return await ctx.atomic(work)

    job = await app.enqueue(ledger, {"note": "paid"})
    async with running(app) as worker:
        row = await wait_state(db, job.id, "succeeded")
    rows = await (await db.execute("SELECT job_id, token, note FROM side")).fetchall()
    assert rows == [(job.id, 1, "paid")]
    assert row["finished_at"] is not None and worker.stats.succeeded == 1  # counted once, written once
    assert await events(db, job.id) == []


async def test_atomic_after_lease_was_stolen_rolls_back_and_records_fencing_loss(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A stolen lease makes ctx.atomic roll back the handler's writes and record 'fencing_lost'."""
    await db.execute(SIDE_TABLE)
    app = Tenure(dsn)
    q = Queries("tenure")
    outcome: list[str] = []
    settled = asyncio.Event()

    @app.task(name="ledger")
    async def ledger(ctx: JobContext) -> None:
        # Another process decides our lease expired and reclaims the job (injected clock).
        async with await AsyncConnection.connect(dsn, autocommit=True) as other:
            row = await (await other.execute("SELECT now()")).fetchone()
            assert row is not None
            later = row[0] + timedelta(hours=1)
            await q.lease_recover_expired(other, limit=10, backoff_base=0, backoff_cap=0, jitter=0, now=later)
            [stolen] = await q.job_claim(
                other,
                queue="default",
                owner="thief",
                limit=1,
                default_lease_seconds=3600 * 5,
                default_runtime_seconds=3600 * 5,
                now=later,
            )
            assert stolen.lease.token == ctx.token + 1

        async def work(tx: tenure.AsyncTransaction) -> None:
            await tx.execute("INSERT INTO side VALUES (%s, %s, 'stale write')", (ctx.job_id, ctx.token))

        try:
            await ctx.atomic(work)
        except tenure.LeaseLost:
            outcome.append("lease lost")
            raise
        else:
            outcome.append("completed")
        finally:
            settled.set()

    job = await app.enqueue(ledger)
    async with running(app) as worker:
        await asyncio.wait_for(settled.wait(), 10)
        await asyncio.sleep(0.2)  # let the executor finish with the job
        fencing_losses = worker.stats.fencing_losses
    assert outcome == ["lease lost"]
    assert await (await db.execute("SELECT count(*) FROM side")).fetchall() == [(0,)]
    row = await job_row(db, job.id)
    assert (row["state"], row["lease_owner"], row["lease_token"]) == ("running", "thief", 2)
    assert [(e[0], e[3], e[4]) for e in await events(db, job.id)] == [
        ("lease_expired", 1, "LEASE_EXPIRED"),
        ("fencing_lost", 1, "FENCED_ATOMIC"),
    ]
    assert fencing_losses == 1


async def test_a_success_the_database_refuses_fails_that_job_alone_and_the_worker_goes_on(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """One job of a batch whose success a trigger refuses is dead with COMPLETION_REJECTED and the
    database's message; every other job of the batch succeeds, and so does a job enqueued after."""
    app = Tenure(dsn)

    @app.task(name="t.echo")
    async def echo(ctx: JobContext, n: int) -> int:
        return n

    jobs = [await app.enqueue(echo, {"n": n}) for n in range(6)]
    await db.execute(
        "CREATE FUNCTION public.refuse_completion() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'job % may not succeed', NEW.id; END $$"
    )
    await db.execute(
        "CREATE TRIGGER refuse_one AFTER UPDATE OF state ON tenure.jobs FOR EACH ROW "
        f"WHEN (NEW.state = 'succeeded' AND NEW.id = {int(jobs[2].id)}) "
        "EXECUTE FUNCTION public.refuse_completion()"
    )
    async with running(app):
        refused = await wait_state(db, jobs[2].id, "dead")
        others = [await wait_state(db, job.id, "succeeded") for n, job in enumerate(jobs) if n != 2]
        later = await app.enqueue(echo, {"n": 99})
        assert (await wait_state(db, later.id, "succeeded"))["result"] == 99
    assert refused["last_error_code"] == "COMPLETION_REJECTED"
    assert f"job {jobs[2].id} may not succeed" in refused["last_error"]
    assert [row["result"] for row in others] == [0, 1, 3, 4, 5]


# -- sync handlers --------------------------------------------------------------------------------


async def test_sync_handlers_run_in_threads_and_atomic_sync_commits(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Plain-def handlers run in threads without blocking the loop; ctx.atomic_sync commits."""
    await db.execute(SIDE_TABLE)
    app = Tenure(dsn)
    threads: list[str] = []
    order: list[str] = []

    @app.task(name="blocking")
    def blocking(ctx: JobContext, note: str) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.5)  # blocks this thread only

        def work(tx: tenure.SyncTransaction) -> None:
            tx.execute("INSERT INTO side VALUES (%s, %s, %s)", (ctx.job_id, ctx.token, note))

        ctx.atomic_sync(work)
        order.append("blocking")

    @app.task(name="quick")
    async def quick(ctx: JobContext) -> None:
        order.append("quick")

    slow = await app.enqueue(blocking, {"note": "from a thread"})
    fast = await app.enqueue(quick)
    async with running(app):
        await wait_state(db, slow.id, "succeeded")
        await wait_state(db, fast.id, "succeeded")
    assert threads and threads[0].startswith("tenure-job") and threads[0] != threading.current_thread().name
    assert order == ["quick", "blocking"]
    rows = await (await db.execute("SELECT job_id, token, note FROM side")).fetchall()
    assert rows == [(slow.id, 1, "from a thread")]


# -- graceful shutdown ----------------------------------------------------------------------------


async def test_graceful_shutdown_gives_unfinished_jobs_back_at_once(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """stop() releases an unfinished job (attempt not counted) and a listener takes it at once."""
    stuck_app, healthy_app = Tenure(dsn), Tenure(dsn)
    started = asyncio.Event()

    @stuck_app.task(name="report")
    async def stuck(ctx: JobContext) -> None:
        started.set()
        await asyncio.Event().wait()  # never finishes on its own

    done_by: list[int] = []

    @healthy_app.task(name="report")
    async def healthy(ctx: JobContext) -> None:
        done_by.append(ctx.token)

    stuck_worker = stuck_app.worker(poll_interval=0.05, shutdown_grace=0.2, worker_id="stuck")
    stuck_task = asyncio.create_task(stuck_worker.run())
    try:
        job = await stuck_app.enqueue(stuck)
        await asyncio.wait_for(started.wait(), 10)
        async with running(healthy_app, poll_interval=30.0, worker_id="healthy") as other:
            assert other.listener is not None
            await asyncio.wait_for(other.listener.connected.wait(), 5)
            await asyncio.sleep(0.1)  # its start-up claim found the job running, so it now waits 30 s
            assert (await job_row(db, job.id))["lease_owner"] == "stuck"
            stopping = time.monotonic()
            stuck_worker.stop()
            stats = await asyncio.wait_for(stuck_task, 10)
            row = await wait_state(db, job.id, "succeeded", timeout=5)
            picked_up_after = time.monotonic() - stopping
    finally:
        stuck_worker.stop()
        await asyncio.wait_for(stuck_task, 10)
        await stuck_app.close()
    assert stats.released == 1
    assert picked_up_after < 3.0  # woken by the release's NOTIFY, not by its 30 s poll
    assert done_by == [2]
    assert row["attempt_count"] == 1 and row["lease_token"] == 2
    assert [e[:5] for e in await events(db, job.id)] == [("released", "running", "pending", 1, "SHUTDOWN")]


# -- bounded batch claims -------------------------------------------------------------------------


async def test_batch_claim_never_exceeds_free_slots(dsn: str, db: AsyncConnection[Any]) -> None:
    """With concurrency 3 and claim_batch 20, never more than 3 handlers run at once, and 3 do; the
    database sees at most 6 running rows (3 handlers, and up to 3 whose completion is being written)."""
    app = Tenure(dsn)
    observed: list[int] = []
    in_flight = 0
    peak = 0
    lock = asyncio.Lock()

    @app.task(name="slow")
    async def slow(ctx: JobContext, n: int) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        async with lock:
            row = await (
                await db.execute("SELECT count(*) FROM tenure.jobs WHERE state = 'running'")
            ).fetchone()
            assert row is not None
            observed.append(row[0])
        await asyncio.sleep(0.1)
        in_flight -= 1

    async with tenure.Client(dsn, registry=app.registry) as producer:
        jobs = await producer.enqueue_many([JobSpec(task="slow", payload={"n": i}) for i in range(12)])
    async with running(app, concurrency=3, claim_batch=20):
        for job in jobs:
            await wait_state(db, job.id, "succeeded")
    assert len(observed) == 12
    assert max(observed) <= 6 and peak == 3, (observed, peak)


# -- concurrent lease recovery --------------------------------------------------------------------


async def test_concurrent_recovery_recovers_each_expired_job_exactly_once(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Five concurrent recovery passes recover every expired lease exactly once (injected clock)."""
    q = Queries("tenure")
    specs = [JobSpec(task="t", max_attempts=1 if i % 3 == 0 else 5) for i in range(150)]
    jobs = await q.job_insert_many(db, specs)
    claimed = await q.job_claim(
        db, queue="default", owner="crashed", limit=1000, default_lease_seconds=30, default_runtime_seconds=60
    )
    assert len(claimed) == len(jobs)
    now = claimed[0].db_now + timedelta(seconds=31)
    pools = [await open_pool(dsn, min_size=1, max_size=1, name=f"recover-{i}") for i in range(5)]
    try:
        passes = [
            Recovery(
                WorkerServices(
                    pool=pool,
                    queries=q,
                    options=WorkerOptions(recovery_batch=8, worker_id=f"r{i}"),
                    dsn=dsn,
                )
            )
            for i, pool in enumerate(pools)
        ]
        results = await asyncio.gather(*(r.run_once(now=now) for r in passes))
    finally:
        for pool in pools:
            await pool.close()
    recovered = [lease.job_id for batch in results for lease in batch]
    assert sorted(recovered) == sorted(j.id for j in jobs)  # each job once, none missed
    assert sum(1 for batch in results if batch) >= 2  # the passes really shared the work
    counts = await (
        await db.execute(
            "SELECT job_id, count(*) FROM tenure.job_events WHERE event = 'lease_expired' GROUP BY job_id "
            "HAVING count(*) <> 1"
        )
    ).fetchall()
    assert counts == []
    states = await (
        await db.execute(
            "SELECT max_attempts, state::text, count(*) FROM tenure.jobs GROUP BY 1, 2 ORDER BY 1"
        )
    ).fetchall()
    assert states == [(1, "dead", 50), (5, "scheduled", 100)]  # waiting out their backoff
    # Before the lease expires, nothing is recovered.
    assert (
        await q.lease_recover_expired(
            db, limit=10, backoff_base=1, backoff_cap=1, jitter=0, now=now - timedelta(seconds=2)
        )
        == []
    )

"""A worker's services survive what production throws at them: a read-only database, revoked
privileges, a row lock held by someone else. They log, back off and go on; a critical one that
keeps failing stops the worker with a reason instead of letting it run jobs it cannot finish."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from _inprocess import events, job_row, running, wait_state
from psycopg import AsyncConnection, conninfo

import tenure
from tenure import JobContext, Tenure, WorkerOptions
from tenure.security.roles import Role, grants

WORKER_SESSIONS = ["tenure-worker", "tenure-listen", "tenure-sync"]


async def set_read_only(db: AsyncConnection[Any], on: bool) -> None:
    """Makes the database read-only (or writable) for new sessions and ends the worker's current
    ones, as a failover to a standby (and back) does."""
    name = db.info.dbname
    await db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if on else "off"}')
    await db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = ANY(%s)",
        (WORKER_SESSIONS,),
    )


def sleeper_app(dsn: str) -> Tenure:
    app = Tenure(dsn)

    @app.task(name="sleep_sync")
    def sleep_sync(ctx: JobContext, seconds: float) -> None:
        time.sleep(seconds)

    return app


async def test_completions_resume_after_the_database_was_read_only(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Completion writes refused with 25006 (read-only, as after a failover) are retried until
    writes work again; the completer never dies, and jobs enqueued afterwards still succeed."""
    app = sleeper_app(dsn)
    async with running(app, lease_seconds=3.0, concurrency=4, service_failure_limit=60) as worker:
        first = [(await app.enqueue("sleep_sync", {"seconds": 0.4})).id for _ in range(3)]
        await asyncio.sleep(0.1)  # claimed and running
        await set_read_only(db, True)
        await asyncio.sleep(1.5)  # the handlers finish; their completions are refused
        await set_read_only(db, False)
        later = [(await app.enqueue("sleep_sync", {"seconds": 0.05})).id for _ in range(3)]
        for job_id in first + later:
            row = await wait_state(db, job_id, "succeeded", timeout=20)
            assert row["state"] == "succeeded"
        assert worker.services is not None
        completer = worker.services.health.services["completer"]
        assert completer.total_failures >= 1 and not completer.failing
        assert worker.failure is None


async def test_a_worker_started_with_no_writable_server_waits_for_one(
    dsn: str, db: AsyncConnection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started while its DSN (target_session_attrs=read-write) finds no writable server,
    as in the middle of a switchover, waits instead of exiting, starts once the server takes
    writes, and runs jobs; a DSN naming no server at all still fails at once."""
    await set_read_only(db, True)
    writable_dsn = conninfo.make_conninfo(dsn, target_session_attrs="read-write")
    app = sleeper_app(writable_dsn)
    worker = app.worker(lease_seconds=3.0, service_failure_limit=60)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(2.0)
        assert not task.done() and not worker.started.is_set(), "the worker gave up or started on a standby"
        await set_read_only(db, False)
        await asyncio.wait_for(worker.started.wait(), timeout=30)
        job = await app.enqueue("sleep_sync", {"seconds": 0.01})
        assert (await wait_state(db, job.id, "succeeded", timeout=20))["state"] == "succeeded"
    finally:
        worker.stop()
        await asyncio.wait_for(task, timeout=20)
        await app.close()
    caplog.clear()
    nowhere = Tenure(conninfo.make_conninfo(dsn, port=1))
    with pytest.raises(tenure.DatabaseUnavailable):
        await nowhere.worker(service_failure_limit=60).run()
    assert "cannot start yet" not in caplog.text, "a DSN that reaches no server is reported, not waited on"


@pytest.fixture
def worker_role(dsn: str) -> Iterator[str]:
    """A LOGIN role with the least-privilege worker GRANTs on this test's database."""
    name = f"tenure_worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
        conn.execute(grants(Role.WORKER, name, "tenure"))
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


def as_role(dsn: str, role: str) -> str:
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    return conninfo.make_conninfo(**params)


async def test_a_revoked_update_grant_stops_claims_then_the_worker_with_a_reason(
    dsn: str, db: AsyncConnection[Any], worker_role: str
) -> None:
    """With UPDATE on jobs revoked, completions fail with 42501: the worker stops claiming, reports
    the failing completer in the registry, and after service_failure_limit exits with the reason."""
    gate = asyncio.Event()

    def gated_app(url: str) -> Tenure:
        app = Tenure(url)

        @app.task(name="gated")
        async def gated(ctx: JobContext) -> None:
            await gate.wait()

        return app

    app, admin = gated_app(as_role(dsn, worker_role)), gated_app(dsn)
    worker = app.worker(
        WorkerOptions(
            poll_interval=0.05, lease_seconds=30.0, service_failure_limit=3.0, priority_aging_seconds=None
        )
    )
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.started.wait(), 10)
    doomed = await admin.enqueue("gated")
    await wait_state(db, doomed.id, "running")
    await db.execute(f'REVOKE UPDATE ON tenure.jobs FROM "{worker_role}"')
    gate.set()  # the handler returns; its completion is refused

    async def registry_failing() -> Any:
        cur = await db.execute(
            "SELECT failing FROM tenure.workers WHERE id = %s", (worker.options.worker_id,)
        )
        row = await cur.fetchone()
        return row[0] if row and row[0] else None

    deadline = time.monotonic() + 15
    failing = None
    while failing is None and time.monotonic() < deadline:
        failing = await registry_failing()
        await asyncio.sleep(0.1)
    assert failing is not None and "completer" in failing, failing
    assert "InsufficientPrivilege" in failing["completer"]["error"]
    # Enqueued once the completions are known to fail: neither claimed nor taken from an offer.
    waiting = await admin.enqueue("gated")

    stats = await asyncio.wait_for(run, 20)
    assert worker.failure is not None and "completer" in worker.failure
    assert "InsufficientPrivilege" in worker.failure
    # The job that could not complete stays running until its lease expires; the one behind it
    # was never claimed, so no attempt of it was spent on a worker that could not finish it.
    assert (await job_row(db, doomed.id))["state"] == "running"
    behind = await job_row(db, waiting.id)
    assert (behind["state"], behind["attempt_count"]) == ("pending", 0)
    assert stats.claimed == 1
    await app.close()
    await admin.close()


async def test_a_locked_row_holds_back_only_its_own_completion(dsn: str, db: AsyncConnection[Any]) -> None:
    """An operator's open SELECT ... FOR UPDATE on one running job: the five jobs finishing beside
    it succeed at once; the locked one completes as soon as the lock is released."""
    app = Tenure(dsn)
    release = asyncio.Event()

    @app.task(name="together")
    async def together(ctx: JobContext, n: int) -> None:
        await release.wait()

    async with running(app, lease_seconds=20.0, concurrency=8) as worker:
        ids = [(await app.enqueue("together", {"n": n})).id for n in range(6)]
        for job_id in ids:
            await wait_state(db, job_id, "running")
        async with await AsyncConnection.connect(dsn) as operator:
            await operator.execute("SELECT * FROM tenure.jobs WHERE id = %s FOR UPDATE", (ids[0],))
            release.set()  # all six finish together: one completion batch
            started = time.monotonic()
            for job_id in ids[1:]:
                await wait_state(db, job_id, "succeeded", timeout=5)
            others_took = time.monotonic() - started
            assert (await job_row(db, ids[0]))["state"] == "running"
            await operator.rollback()
        await wait_state(db, ids[0], "succeeded", timeout=5)
        assert others_took < 5
        assert await events(db, ids[0]) == []  # retried alone, never counted as a fencing loss
        assert worker.stats.fencing_losses == 0


async def test_a_locked_row_does_not_stop_other_leases_from_being_renewed(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Heartbeats skip a row locked elsewhere: the other jobs' leases keep being renewed (their
    progress moves), so none of them expires while the lock is held."""
    app = Tenure(dsn)
    stop = asyncio.Event()

    @app.task(name="progressing")
    async def progressing(ctx: JobContext, n: int) -> None:
        step = 0
        while not stop.is_set():
            step += 1
            ctx.progress(step)
            await asyncio.sleep(0.05)

    async with running(app, lease_seconds=1.0, concurrency=4) as worker:
        ids = [(await app.enqueue("progressing", {"n": n})).id for n in range(3)]
        for job_id in ids:
            await wait_state(db, job_id, "running")
        async with await AsyncConnection.connect(dsn) as operator:
            await operator.execute("SELECT * FROM tenure.jobs WHERE id = %s FOR UPDATE", (ids[0],))
            await asyncio.sleep(2.5)  # two and a half lease lengths
            for job_id in ids[1:]:
                row = await job_row(db, job_id)
                assert (row["state"], row["lease_token"]) == ("running", 1), row
            await operator.rollback()
        stop.set()
        for job_id in ids[1:]:
            await wait_state(db, job_id, "succeeded")
        assert worker.services is not None
        assert not worker.services.health.services["heartbeat"].failing

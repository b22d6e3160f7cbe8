"""Real `tenure worker` processes whose pool goes through PgBouncer in transaction mode."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from _bouncer import Bouncer, WorkerProcesses, rows, show, states, wait_until
from _pooled_app import LEAKED_TIMEOUT, LIMITED_MAX_RUNNING
from psycopg import conninfo

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec
from tenure.worker.listener import PROBE_ATTEMPTS, PROBE_TIMEOUT

NO_PREPARE = ("--prepare-threshold", "none")
CONCURRENCY = 4


async def enqueue(db: psycopg.AsyncConnection[Any], task: str, n: int, **payload: Any) -> list[int]:
    jobs = await Queries("tenure").job_insert_many(
        db, [JobSpec(task=task, queue="pooled", payload=payload)] * n
    )
    return [job.id for job in jobs]


async def test_a_worker_claims_and_completes_through_pgbouncer(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, dsn: str, workers: WorkerProcesses, pgbouncer: Bouncer
) -> None:
    """A worker drains 200 jobs through PgBouncer, each fence-completed once, within its budget."""
    await enqueue(db, "pooled.noop", 200)
    worker = workers.start(
        pooled_dsn,
        *NO_PREPARE,
        "--listen-dsn",
        dsn,
        "--poll-interval",
        "0.2",
        "--concurrency",
        str(CONCURRENCY),
    )

    async def drained() -> bool:
        return await states(db) == {"succeeded": 200}

    await wait_until(drained, timeout=30, what="200 jobs to succeed", workers=(worker,))
    dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
    clients = show(pgbouncer, "CLIENTS", dbname)
    assert 2 <= len(clients) <= CONCURRENCY + 4, clients
    assert len(show(pgbouncer, "SERVERS", dbname)) <= pgbouncer.pool_size
    assert await listening_sessions(db) == 1
    assert worker.stop() == 0
    [row] = await rows(
        db, "SELECT max(lease_token) AS token, max(attempt_count) AS attempts FROM tenure.jobs"
    )
    assert (row["token"], row["attempts"]) == (1, 1)
    log = worker.log()
    assert " failed " not in log and "WARNING" not in log, log[-3000:]


async def server_settings(bouncer: Bouncer, pooled_dsn: str, setting: str) -> dict[int, str]:
    """`setting` on every server session PgBouncer keeps for the database: as many transactions
    as its pool has sessions, held at once, each on its own session."""
    conns = [await psycopg.AsyncConnection.connect(pooled_dsn) for _ in range(bouncer.pool_size)]
    try:
        found = {}
        for conn in conns:
            [(pid, value)] = await (
                await conn.execute("SELECT pg_backend_pid(), current_setting(%s)", [setting])
            ).fetchall()
            found[pid] = value
        return found
    finally:
        for conn in conns:
            await conn.rollback()  # an open transaction at close would make PgBouncer drop the session
            await conn.close()


async def test_ctx_atomic_commits_work_and_completion_together_through_pgbouncer(
    db: psycopg.AsyncConnection[Any],
    pooled_dsn: str,
    dsn: str,
    workers: WorkerProcesses,
    pgbouncer: Bouncer,
) -> None:
    """ctx.atomic(_sync) commits each write with its fenced completion and leaves no SET behind."""
    await db.execute("CREATE TABLE public.deposits (job_id bigint PRIMARY KEY, token bigint, amount int)")
    ids = await enqueue(db, "pooled.deposit", 10, amount=5) + await enqueue(
        db, "pooled.deposit_sync", 10, amount=7
    )
    worker = workers.start(pooled_dsn, *NO_PREPARE, "--listen-dsn", dsn, "--poll-interval", "0.2")

    async def drained() -> bool:
        return await states(db) == {"succeeded": 20}

    await wait_until(drained, timeout=30, what="20 deposits to succeed", workers=(worker,))
    assert worker.stop() == 0
    found = await rows(
        db,
        "SELECT d.job_id, d.token = j.lease_token AS fenced, d.amount FROM public.deposits d"
        " JOIN tenure.jobs j ON j.id = d.job_id ORDER BY d.job_id",
    )
    assert [(r["job_id"], r["fenced"]) for r in found] == [(i, True) for i in sorted(ids)]
    assert sum(r["amount"] for r in found) == 10 * 5 + 10 * 7
    sessions = await server_settings(pgbouncer, pooled_dsn, "statement_timeout")
    assert len(sessions) == pgbouncer.pool_size
    assert LEAKED_TIMEOUT not in sessions.values(), sessions


async def listening_sessions(db: psycopg.AsyncConnection[Any]) -> int:
    """Sessions of this database that LISTENed, as a worker's listener does (direct ones only:
    through PgBouncer the LISTEN lands on a pooled session, which stays in the pool)."""
    [row] = await rows(
        db,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'tenure-listen'",
    )
    return int(row["n"])


@pytest.mark.slow
async def test_a_worker_without_a_listen_dsn_says_so_and_drains_by_polling(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, workers: WorkerProcesses
) -> None:
    """Without a listen DSN the worker warns, naming --listen-dsn, and drains by polling."""
    worker = workers.start(pooled_dsn, *NO_PREPARE, "--poll-interval", "0.3")

    async def warned() -> bool:
        return "receives no notifications" in worker.log()

    await wait_until(warned, timeout=40, what="the listener's warning", workers=(worker,))
    warning = " ".join(line for line in worker.log().splitlines() if "receives no notifications" in line)
    assert "--listen-dsn" in warning and "TENURE_LISTEN_DSN" in warning and "polling every 0.3s" in warning
    await enqueue(db, "pooled.noop", 20)

    async def drained() -> bool:
        return await states(db) == {"succeeded": 20}

    await wait_until(drained, timeout=10, what="20 jobs to succeed by polling", workers=(worker,))
    assert worker.stop() == 0


@pytest.mark.slow
async def test_a_worker_with_a_direct_listen_dsn_is_woken_by_notify(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, dsn: str, workers: WorkerProcesses
) -> None:
    """With a direct --listen-dsn, NOTIFY starts each job well within a second of a 10 s poll interval."""
    worker = workers.start(pooled_dsn, *NO_PREPARE, "--listen-dsn", dsn, "--poll-interval", "10")

    async def listening() -> bool:
        return await listening_sessions(db) == 1

    await wait_until(listening, timeout=20, what="the worker's direct LISTEN session", workers=(worker,))
    await asyncio.sleep(0.5)  # past the claims of the start and of the listener's first wake-up
    latencies = []
    async with await psycopg.AsyncConnection.connect(
        pooled_dsn, autocommit=True, prepare_threshold=None
    ) as conn:
        for _ in range(3):
            [job_id] = await enqueue(conn, "pooled.noop", 1)

            async def done(job_id: int = job_id) -> list[dict[str, Any]]:
                return await rows(
                    db,
                    "SELECT extract(epoch FROM finished_at - created_at)::float8 AS latency"
                    " FROM tenure.jobs WHERE id = %s AND state = 'succeeded'",
                    (job_id,),
                )

            [row] = await wait_until(done, timeout=15, what=f"job {job_id} to succeed", workers=(worker,))
            latencies.append(row["latency"])
    assert max(latencies) < 1.0, latencies
    await asyncio.sleep(max(0.0, PROBE_TIMEOUT * PROBE_ATTEMPTS + 0.5 - worker.age()))
    assert worker.stop() == 0
    assert "receives no notifications" not in worker.log()


async def test_a_limited_queue_keeps_its_limit_through_pgbouncer(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, dsn: str, workers: WorkerProcesses
) -> None:
    """Two workers' claims of a limited queue through PgBouncer never run more jobs at once than its limit."""
    await db.execute(
        "CREATE TABLE public.runs (job_id bigint PRIMARY KEY, claimed timestamptz, completed timestamptz)"
    )
    ids = await Queries("tenure").job_insert_many(
        db, [JobSpec(task="pooled.limited", queue="pooled_limited")] * 24
    )
    started = [
        workers.start(
            pooled_dsn, *NO_PREPARE, "--listen-dsn", dsn, "--poll-interval", "0.1", "--concurrency", "4"
        )
        for _ in range(2)
    ]

    async def drained() -> bool:
        return await states(db) == {"succeeded": len(ids)}

    await wait_until(drained, timeout=30, what="the limited queue to drain", workers=tuple(started))
    for worker in started:
        assert worker.stop() == 0
        assert " failed " not in worker.log(), worker.log()[-3000:]
    [row] = await rows(
        db,
        "SELECT count(*) AS runs, max((SELECT count(*) FROM public.runs o"
        " WHERE o.claimed <= r.claimed AND o.completed > r.claimed)) AS peak FROM public.runs r",
    )
    assert row["runs"] == len(ids)
    assert 1 <= row["peak"] <= LIMITED_MAX_RUNNING

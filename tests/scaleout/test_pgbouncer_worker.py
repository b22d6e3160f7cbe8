"""Real `tenure worker` processes whose pool goes through PgBouncer in transaction mode."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from _bouncer import Bouncer, WorkerProcesses, rows, states, wait_until
from _pooled_app import LEAKED_TIMEOUT

from tenure.db.queries import Queries
from tenure.jobs import JobSpec

NO_PREPARE = ("--prepare-threshold", "none")


async def enqueue(db: psycopg.AsyncConnection[Any], task: str, n: int, **payload: Any) -> list[int]:
    jobs = await Queries("tenure").job_insert_many(
        db, [JobSpec(task=task, queue="pooled", payload=payload)] * n
    )
    return [job.id for job in jobs]


@pytest.mark.slow
async def test_a_worker_claims_and_completes_through_pgbouncer(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, dsn: str, workers: WorkerProcesses, pgbouncer: Bouncer
) -> None:
    """A worker whose pool goes through PgBouncer claims and fence-completes 200 jobs, each once."""
    await enqueue(db, "pooled.noop", 200)
    worker = workers.start(pooled_dsn, *NO_PREPARE, "--listen-dsn", dsn, "--poll-interval", "0.2")

    async def drained() -> bool:
        return await states(db) == {"succeeded": 200}

    await wait_until(drained, timeout=30, what="200 jobs to succeed", workers=(worker,))
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
            await conn.close()


async def test_ctx_atomic_commits_work_and_completion_together_through_pgbouncer(
    db: psycopg.AsyncConnection[Any],
    pooled_dsn: str,
    dsn: str,
    workers: WorkerProcesses,
    pgbouncer: Bouncer,
) -> None:
    """ctx.atomic and ctx.atomic_sync through PgBouncer commit each job's write with its fenced
    completion, once per job, and a SET made inside reaches no pooled server session."""
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

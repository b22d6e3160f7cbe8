"""Real `tenure worker` processes whose pool goes through PgBouncer in transaction mode."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from _bouncer import Bouncer, WorkerProcesses, rows, states, wait_until

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

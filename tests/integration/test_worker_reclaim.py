"""A worker that is handed back its own job under a newer token stops its older attempt at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from test_worker_runtime import job_row, running

import tenure
from tenure.db.queries import Queries


async def test_reclaim_by_the_same_worker_stops_the_older_attempt_at_once(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """When the database re-issues a job to the worker still running it, the stale attempt is
    cancelled as the new one starts, not left running until its local lease estimate runs out."""
    app = tenure.Tenure(dsn)
    runs: dict[int, dict[str, Any]] = {}

    @app.task(name="reclaim.slow")
    async def slow(ctx: tenure.JobContext) -> None:
        run = runs[ctx.token] = {"start": time.monotonic(), "how": "running"}
        try:
            await asyncio.sleep(0.1 if ctx.token >= 2 else 8.0)
            run["how"] = "finished"
        except asyncio.CancelledError:
            run["how"] = "cancelled"
            raise
        finally:
            run["end"] = time.monotonic()

    # A 30 s lease: the local watchdog cannot be what stops the first attempt in this test.
    async with running(app, lease_seconds=30.0) as worker:
        job = await app.enqueue("reclaim.slow")
        for _ in range(200):
            if 1 in runs:
                break
            await asyncio.sleep(0.02)
        assert 1 in runs, "the first attempt never started"
        # The database's view: the lease ran out (a pause, a clock the worker cannot see).
        await db.execute(
            "UPDATE tenure.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (job.id,),
        )
        recovered = await queries.lease_recover_expired(
            db, limit=10, backoff_base=0.0, backoff_cap=0.0, jitter=0.0
        )
        assert [r.job_id for r in recovered] == [job.id]
        for _ in range(300):
            if (await job_row(db, job.id))["state"] == "succeeded":
                break
            await asyncio.sleep(0.02)
        final = await job_row(db, job.id)
        assert final["state"] == "succeeded" and final["lease_token"] == 2
        assert worker.stats.leases_lost >= 1

    first, second = runs[1], runs[2]
    assert first["how"] == "cancelled", first
    assert first["end"] - second["start"] < 0.5, "the stale attempt kept running beside the new one"

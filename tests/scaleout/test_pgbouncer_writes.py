"""Fenced writes, enqueue in the caller's transaction, COPY and migrations through PgBouncer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _bouncer import WorkerProcesses, rows, states

import tenure
from tenure.db.connect import LISTEN_DSN_ENV, PREPARE_THRESHOLD_ENV
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

QUEUE = "pooled"


@pytest.fixture
def no_prepared_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Tenure connection of this process prepares nothing, as behind PgBouncer 1.18."""
    monkeypatch.setenv(PREPARE_THRESHOLD_ENV, "none")


async def pooled(dsn: str, *, autocommit: bool = True) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit, prepare_threshold=None)


async def test_a_stale_token_is_refused_through_pgbouncer(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str
) -> None:
    """A stale token's completion, heartbeat and failure change nothing; the current one completes."""
    queries = Queries("tenure")
    [job] = await queries.job_insert_many(db, [JobSpec(task="pooled.noop", queue=QUEUE)])
    claim = {"queue": QUEUE, "owner": "w", "limit": 1, "default_lease_seconds": 30.0,
             "default_runtime_seconds": 60.0}  # fmt: skip
    async with await pooled(pooled_dsn) as conn:
        [old] = await queries.job_claim(conn, **claim)
        later = old.lease.expires_at + timedelta(seconds=1)
        [recovered] = await queries.lease_recover_expired(
            conn, limit=10, backoff_base=0.0, backoff_cap=0.0, jitter=0.0, now=later
        )
        assert recovered.job_id == job.id
        [new] = await queries.job_claim(conn, **claim, now=later)
        assert new.lease.token == old.lease.token + 1

        stale = (job.id, old.lease.token)
        assert await queries.job_complete_many(conn, owner="w", leases=[stale], now=later) == {stale: "lost"}
        renewal = (job.id, old.lease.token, {"step": 2}, 30.0)
        assert await queries.lease_extend_many(conn, owner="w", renewals=[renewal], now=later) == []
        failed = await queries.job_fail(
            conn, job_id=job.id, owner="w", token=old.lease.token, error_code="LATE", error="late",
            retry_delay=1.0, now=later,
        )  # fmt: skip
        assert failed.outcome == "lost"
        [row] = await rows(db, "SELECT state::text AS state, lease_token FROM tenure.jobs")
        assert row == {"state": "running", "lease_token": new.lease.token}

        current = (job.id, new.lease.token)
        assert await queries.job_complete_many(conn, owner="w", leases=[current], now=later) == {
            current: "done"
        }
    assert await states(db) == {"succeeded": 1}


async def test_enqueue_in_the_callers_transaction_through_pgbouncer(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, no_prepared_statements: None
) -> None:
    """Enqueues with conn= through PgBouncer commit with the caller's transaction and roll back with it."""
    await db.execute("CREATE TABLE public.orders (id int PRIMARY KEY)")
    async with tenure.Client(pooled_dsn) as client, await pooled(pooled_dsn, autocommit=False) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO public.orders VALUES (1)")
            kept = await client.enqueue("pooled.noop", queue=QUEUE, conn=conn)
        async with conn.transaction():
            await conn.execute("INSERT INTO public.orders VALUES (2)")
            await client.enqueue("pooled.noop", queue=QUEUE, conn=conn)
            raise psycopg.Rollback

    def sync_enqueue() -> int:
        with (
            tenure.SyncClient(pooled_dsn) as sync_client,
            psycopg.connect(pooled_dsn, prepare_threshold=None) as sync_conn,
        ):
            with sync_conn.transaction():
                sync_conn.execute("INSERT INTO public.orders VALUES (3)")
                job = sync_client.enqueue("pooled.noop", queue=QUEUE, conn=sync_conn)
            with sync_conn.transaction():
                sync_conn.execute("INSERT INTO public.orders VALUES (4)")
                sync_client.enqueue("pooled.noop", queue=QUEUE, conn=sync_conn)
                raise psycopg.Rollback
        return job.id

    kept_sync = await asyncio.to_thread(sync_enqueue)
    assert [r["id"] for r in await rows(db, "SELECT id FROM public.orders ORDER BY id")] == [1, 3]
    assert [r["id"] for r in await rows(db, "SELECT id FROM tenure.jobs ORDER BY id")] == [
        kept.id,
        kept_sync,
    ]


async def test_copy_enqueue_through_pgbouncer(
    db: psycopg.AsyncConnection[Any], pooled_dsn: str, no_prepared_statements: None
) -> None:
    """Client.enqueue_copy and SyncClient.enqueue_copy load all their jobs through PgBouncer."""
    specs = [JobSpec(task="pooled.noop", queue=QUEUE, payload={"n": i}) for i in range(2000)]
    async with tenure.Client(pooled_dsn) as client:
        assert await client.enqueue_copy(specs) == 2000

    def sync_copy() -> int:
        with tenure.SyncClient(pooled_dsn) as sync_client:
            return sync_client.enqueue_copy(specs[:500])

    assert await asyncio.to_thread(sync_copy) == 500
    [row] = await rows(db, "SELECT count(*) AS n, count(DISTINCT payload) AS payloads FROM tenure.jobs")
    assert row == {"n": 2500, "payloads": 2000}
    assert await states(db) == {"pending": 2500}


def test_migrate_through_pgbouncer_is_refused_naming_the_direct_dsn(pooled_dsn: str, dsn: str) -> None:
    """`tenure migrate` through the pooler exits non-zero asking for the server's own DSN; on that it runs."""
    command = [sys.executable, "-m", "tenure.ops.cli", "migrate", "--dsn"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
    refused = subprocess.run([*command, pooled_dsn], capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert "needs a direct connection" in message and "--dsn" in message, message
    direct = subprocess.run([*command, dsn], capture_output=True, text=True, timeout=60, env=env)
    assert direct.returncode == 0, direct.stderr
    assert "up to date" in direct.stdout


async def test_a_result_waiter_through_pgbouncer_listens_on_tenure_listen_dsn(
    pooled_dsn: str, dsn: str, workers: WorkerProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client.result through PgBouncer wakes on TENURE_LISTEN_DSN as the job finishes: its poll
    comes only after its timeout, so nothing but the notification can bring the result."""
    monkeypatch.setenv(PREPARE_THRESHOLD_ENV, "none")
    monkeypatch.setenv(LISTEN_DSN_ENV, dsn)
    worker = workers.start(
        pooled_dsn, "--prepare-threshold", "none", "--listen-dsn", dsn, "--poll-interval", "0.1"
    )
    async with tenure.Client(pooled_dsn) as client:
        job = await client.enqueue("pooled.answer", queue=QUEUE, result_wanted=True)
        assert await client.result(job.id, poll=120.0, timeout=60) == 42
    assert worker.stop() == 0

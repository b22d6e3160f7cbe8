"""Waiting for a job's result through PgBouncer in transaction mode, with no direct listen DSN:
the waiter finds out that its LISTEN would hear nothing and polls at its own poll interval,
instead of reading only every fifth interval in wait of a notification that never comes."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec
from tenure.producer.client import Client
from tenure.producer.sync_client import SyncClient

CLAIM = {"queue": "pooled", "limit": 1, "default_lease_seconds": 30, "default_runtime_seconds": 60}


async def finish_later(dsn: str, job_id: int, delay: float) -> None:
    """Claims and completes job `job_id` on the direct connection after `delay` seconds."""
    await asyncio.sleep(delay)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [claimed] = await Queries("tenure").job_claim(conn, owner="w", **CLAIM)
        assert claimed.id == job_id
        await Queries("tenure").job_complete_many(
            conn,
            owner="w",
            leases=[(job_id, claimed.lease.token)],
            results={(job_id, claimed.lease.token): 7},
        )


@pytest.fixture(autouse=True)
def no_prepared_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENURE_PREPARE_THRESHOLD", "none")
    monkeypatch.delenv("TENURE_LISTEN_DSN", raising=False)


async def test_an_async_waiter_behind_pgbouncer_polls_and_gets_the_result(
    dsn: str, pooled_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The waiter's listening connection goes through PgBouncer: it says it polls, and the result
    comes back once the job succeeds."""
    caplog.set_level("INFO", logger="tenure.client")
    async with Client(pooled_dsn, schema="tenure") as client:
        [job] = await client.enqueue_many([JobSpec(task="pooled.noop", queue="pooled", result_wanted=True)])
        finishing = asyncio.create_task(finish_later(dsn, job.id, 0.3))
        assert await client.result(job.id, poll=0.1, timeout=20) == 7
        await finishing
    assert "waiting for a result by polling" in caplog.text and "TENURE_LISTEN_DSN" in caplog.text


def test_a_blocking_waiter_behind_pgbouncer_polls_and_gets_the_result(
    dsn: str, pooled_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The blocking client's waiter does the same."""
    caplog.set_level("INFO", logger="tenure.client")
    with SyncClient(pooled_dsn, schema="tenure") as client:
        [job] = client.enqueue_many([JobSpec(task="pooled.noop", queue="pooled", result_wanted=True)])
        finisher = threading.Thread(target=asyncio.run, args=(finish_later(dsn, job.id, 0.3),))
        finisher.start()
        assert client.result(job.id, poll=0.1, timeout=20) == 7
        finisher.join()
    assert "waiting for a result by polling" in caplog.text


async def test_a_waiter_on_a_direct_connection_listens(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """Straight to PostgreSQL the waiter listens (no polling notice) and is woken by the result."""
    caplog.set_level("INFO", logger="tenure.client")
    async with Client(dsn, schema="tenure") as client:
        [job] = await client.enqueue_many([JobSpec(task="pooled.noop", queue="pooled", result_wanted=True)])
        finishing = asyncio.create_task(finish_later(dsn, job.id, 0.3))
        # A poll of 30 s against a 20 s timeout: only the notification can bring the result back.
        assert await client.result(job.id, poll=30, timeout=20) == 7
        await finishing
    assert "waiting for a result by polling" not in caplog.text

"""`tenure demo` end to end: real worker processes, a SIGKILL and a SIGSTOP past the lease."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tenure.ops.demo.database import drop_database, with_database
from tenure.ops.demo.queries import BankQueries
from tenure.ops.demo.report import read_report
from tenure.ops.demo.workload import OPENING_BALANCE

pytestmark = [pytest.mark.crash, pytest.mark.slow]

TRANSFERS = 300
ACCOUNTS = 20
RUN_TIMEOUT = 90.0

# What a fencing bug would leave behind: a stale attempt's transfer committed a second time.
APPLY_ONE_TRANSFER_TWICE = """
WITH victim AS (SELECT * FROM bank.ledger ORDER BY id LIMIT 1),
copied AS (
    INSERT INTO bank.ledger (job_id, idempotency_key, token, source, target, amount)
    SELECT job_id, idempotency_key, token - 1, source, target, amount FROM victim
)
UPDATE bank.accounts a
SET balance = a.balance + CASE WHEN a.id = v.target THEN v.amount ELSE -v.amount END
FROM victim v
WHERE a.id IN (v.source, v.target)
"""


@pytest.fixture
def demo_db(server_dsn: str) -> Iterator[str]:
    """A database name of this test alone, so concurrent runs on one server never collide."""
    name = f"tenure_demo_t_{uuid.uuid4().hex[:12]}"
    yield name
    asyncio.run(drop_database(server_dsn, name))


def run_demo(server_dsn: str, database: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    argv = [
        sys.executable,
        "-m",
        "tenure.ops.cli",
        "demo",
        "--dsn",
        server_dsn,
        "--database",
        database,
        "--accounts",
        str(ACCOUNTS),
        "--seed",
        "7",
        "--json",
        "--timeout",
        str(RUN_TIMEOUT),
        # A small connection footprint: the test server is shared with other suites.
        "--concurrency",
        "4",
        *extra,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT + 30)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, report, done.stderr


def test_demo_survives_a_crash_and_a_pause_with_every_invariant_holding(
    server_dsn: str, demo_db: str
) -> None:
    """One worker SIGKILLed, one SIGSTOPped past its lease: leases are recovered, every invariant holds."""
    code, report, stderr = run_demo(
        server_dsn, demo_db, "--transfers", str(TRANSFERS), "--workers", "3", "--lease", "1"
    )
    assert code == 0, f"demo failed ({code}): {stderr[-2000:]}\n{json.dumps(report, indent=1)[:4000]}"
    failed = [i for i in report["invariants"] if not i["ok"]]
    assert report["ok"] and not failed, failed
    assert [f["signal"] for f in report["faults"]] == ["SIGKILL", "SIGSTOP", "SIGCONT"]
    assert report["faults"][0]["leases_held"] >= 1, "the crash must hit a worker with jobs in flight"
    leases = report["leases"]
    assert leases["expired_to_pending"] >= 1 and leases["recovered_then_succeeded"] >= 1, leases
    jobs = report["jobs"]
    assert jobs["succeeded"] + jobs["dead"] == TRANSFERS, jobs
    # Lock waits behind the paused worker are contention, retried; only refused overdrafts die.
    assert set(jobs["dead_by_code"]) <= {"INSUFFICIENT_FUNDS"}, jobs


async def test_invariants_catch_a_transfer_applied_twice(server_dsn: str, demo_db: str) -> None:
    """The exactly-once check is not vacuous: one transfer committed twice makes the report fail."""
    code, report, stderr = await asyncio.to_thread(
        run_demo, server_dsn, demo_db, "--transfers", "40", "--workers", "1", "--no-faults"
    )
    assert code == 0 and report["ok"], stderr[-2000:]
    async with await psycopg.AsyncConnection.connect(
        with_database(server_dsn, demo_db), autocommit=True
    ) as conn:
        await conn.execute(APPLY_ONE_TRANSFER_TWICE)
        broken = await read_report(conn, BankQueries(), enqueued=40, total_money=ACCOUNTS * OPENING_BALANCE)
    verdicts = {i.name: i.ok for i in broken.invariants}
    assert not broken.ok
    assert verdicts["each succeeded transfer applied exactly once"] is False
    # Money moved twice is still conserved: only the per-job check sees the double application.
    assert verdicts["total money unchanged"] is True

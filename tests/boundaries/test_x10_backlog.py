"""X10: a backlog large enough for the planner to matter. The claim (both its lanes), the promotion of
scheduled jobs and the recovery statement must use their partial indexes with no sort and no
sequential scan, and jobs that are not yet due must cost the claim nothing; claim time against an
empty queue and recovery throughput are printed (figures, never assertions).

The CI scale is TENURE_X10_BACKLOG pending jobs (default 150000), loaded with COPY; the benchmark asks the
same question at 1M.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from _claims import CLAIM_ARGS
from tenure.db.queries import Queries
from tenure.db.sqlfiles import named_queries
from tenure.model.jobs import JobSpec
from tenure.producer.client import Client

SCHEMA = "tenure"
BACKLOG = int(os.environ.get("TENURE_X10_BACKLOG", "150000"))
QUEUE = "x10"
CLAIM_ROUNDS = 30
EXPIRED = 20_000


def _claim_params(owner: str, now: datetime | None = None) -> dict[str, Any]:
    return CLAIM_ARGS | {
        "queue": QUEUE,
        "owner": owner,
        "limit": 10,
        "oldest": 1,
        "by_priority": 9,
        "tasks": ["x10.task", "x10.other"],
        "now": now,
    }


def _recover_params() -> dict[str, Any]:
    return {
        "limit": 1000,
        "backoff_base": 1.0,
        "backoff_cap": 1.0,
        "jitter": 0.0,
        "policy_tasks": ["t"],
        "policy_bases": [2.0],
        "policy_caps": [60.0],
        "policy_jitters": [0.5],
        "now": None,
    }


async def _load(dsn: str, n: int) -> None:
    """`n` pending jobs of QUEUE, and a tenth as many of another queue."""
    async with Client(dsn, schema=SCHEMA) as client:
        for start in range(0, n, 50_000):
            batch = [
                JobSpec(task="x10.task", queue=QUEUE, payload={"i": i})
                for i in range(start, min(n, start + 50_000))
            ]
            await client.enqueue_copy(batch)
        # Other queues' backlog sits in the same index, in front of and behind this one.
        await client.enqueue_copy([JobSpec(task="x10.other", queue="x10-other") for _ in range(n // 10)])


def _plan(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (without running it) of one named statement, as the planner's JSON tree."""
    row = conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return plan  # type: ignore[no-any-return]


def _generic_plan(conn: psycopg.Connection[Any], statement: str) -> dict[str, Any]:
    """The plan PostgreSQL (16+) makes for `statement` without its parameters' values, as for a
    prepared statement on a generic plan: each %(name)s becomes a numbered placeholder."""
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    generic = re.sub(r"%\((\w+)\)s", placeholder, statement)
    row = conn.execute(f"EXPLAIN (GENERIC_PLAN, FORMAT JSON) {generic}".encode()).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return plan  # type: ignore[no-any-return]


def _plans(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan with these parameters and, on PostgreSQL 16+, the generic one: a worker's pooled
    connections prepare their statements, and PostgreSQL may then settle on a generic plan."""
    found = [_plan(conn, statement, params)]
    if conn.info.server_version >= 160000:
        found.append(_generic_plan(conn, statement))
    return found


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def _assert_indexed(plan: dict[str, Any], index: str) -> None:
    nodes = _nodes(plan)
    text = json.dumps(plan)
    assert any(n.get("Index Name") == index for n in nodes), f"{index} unused:\n{text}"
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], f"a sort:\n{text}"
    seq = [
        n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in ("jobs", "job_events")
    ]
    assert not seq, f"a sequential scan:\n{text}"


async def _time_claims(dsn: str) -> float:
    """Median seconds of one 10-job claim, over CLAIM_ROUNDS claims."""
    q = Queries(SCHEMA)
    times = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for i in range(CLAIM_ROUNDS):
            started = time.perf_counter()
            claimed = await q.job_claim(
                conn,
                queue=QUEUE,
                owner=f"x10-{i}",
                limit=10,
                default_lease_seconds=30,
                default_runtime_seconds=60,
            )
            times.append(time.perf_counter() - started)
            assert len(claimed) == 10
    return sorted(times)[len(times) // 2]


@pytest.mark.slow
async def test_claim_and_recovery_use_their_indexes_at_backlog(dsn: str, server_dsn: str) -> None:
    """With a large backlog the claim and the recovery scan their partial indexes in order, with no
    sort and no sequential scan; claim time vs a small queue and recovery throughput are printed."""
    small = await _small_queue_claim_time(dsn)
    await _load(dsn, BACKLOG)
    sql = named_queries(SCHEMA)
    with psycopg.connect(dsn, autocommit=True) as conn:
        pending = conn.execute(f"SELECT count(*) FROM {SCHEMA}.jobs WHERE state = 'pending'").fetchone()
        assert pending is not None and pending[0] == BACKLOG + BACKLOG // 10
        conn.execute(f"ANALYZE {SCHEMA}.jobs")
        for claim_plan in _plans(conn, sql["job_claim"], _claim_params("explain")):
            _assert_indexed(claim_plan, "jobs_claimable_idx")
            _assert_indexed(claim_plan, "jobs_claimable_by_age_idx")
        for claim_plan in _plans(conn, sql["job_claim_by_priority"], _claim_params("explain")):
            _assert_indexed(claim_plan, "jobs_claimable_idx")
        # Expired leases to recover: a crashed fleet's worth, then the recovery plan over them.
        conn.execute(
            f"UPDATE {SCHEMA}.jobs SET state = 'running', attempt_count = 1, lease_token = 1,"
            " lease_owner = 'crashed', attempted_at = now() - interval '1 hour',"
            " lease_expires_at = now() - interval '1 minute', lease_deadline = now() + interval '1 hour'"
            f" WHERE id IN (SELECT id FROM {SCHEMA}.jobs WHERE queue = %s ORDER BY id DESC LIMIT %s)",
            [QUEUE, EXPIRED],
        )
        conn.execute(f"ANALYZE {SCHEMA}.jobs")
        for recover_plan in _plans(conn, sql["lease_recover_expired"], _recover_params()):
            _assert_indexed(recover_plan, "jobs_running_expiry_idx")

    at_backlog = await _time_claims(dsn)
    q = Queries(SCHEMA)
    recovered, started = 0, time.perf_counter()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while batch := await q.lease_recover_expired(
            conn, limit=1000, backoff_base=1, backoff_cap=1, jitter=0
        ):
            recovered += len(batch)
    elapsed = time.perf_counter() - started
    assert recovered >= EXPIRED  # the expired ones, plus nothing else that was running for long
    print(
        f"\nX10 at {BACKLOG} pending: claim of 10 jobs median {at_backlog * 1000:.2f} ms vs "
        f"{small * 1000:.2f} ms on a small queue (ratio {at_backlog / small:.2f}); recovery of "
        f"{recovered} expired leases in {elapsed:.2f}s ({recovered / elapsed:.0f} jobs/s)"
    )


async def test_the_claim_takes_its_rows_by_primary_key_on_statistics_older_than_the_backlog(
    dsn: str,
) -> None:
    """Statistics taken while the table was empty (a VACUUM before a bulk load) do not lead the
    claim's UPDATE to its rows through a claimable partial index, which reads every pending entry
    of the queue: it takes them by primary key, with these parameters and under a generic plan, in
    both forms of the plain claim (with an oldest share due and without)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")
    await _load(dsn, 20_000)
    sql = named_queries(SCHEMA)
    with psycopg.connect(dsn, autocommit=True) as conn:
        params = _claim_params("explain") | {"limit": 100, "by_priority": 90}
        for name in ("job_claim", "job_claim_by_priority"):
            for plan in _plans(conn, sql[name], params):
                reached = _indexes_reaching(plan, "j")
                assert reached == {"jobs_pkey"}, (name, json.dumps(plan))


async def test_a_completion_reads_its_batch_once_on_statistics_older_than_the_batch(dsn: str) -> None:
    """On statistics taken while the table was empty, the fenced completion of 100 claimed jobs
    reads the batch it was given once, not once more for each job it locks."""
    q = Queries(SCHEMA)
    claimed = await _claimed_on_stale_statistics(dsn, q, pending=2_000, batch=100)
    assert len(claimed) == 100
    params = q._complete_params("x10", [(j.id, j.lease.token) for j in claimed], None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        plan = _generic_plan_run(conn, named_queries(SCHEMA)["job_complete_many"], params)
    rereads = [n for n in _nodes(plan) if n.get("CTE Name") == "ids" and n.get("Actual Loops", 0) > 1]
    assert not rereads, json.dumps(plan)


async def test_telling_a_completion_s_unsettled_jobs_apart_reads_only_those_rows(dsn: str) -> None:
    """The statement that says why a completion left some jobs unsettled (busy, lost, a repeat)
    reaches them by primary key on a generic plan, on statistics older than the 20,000 pending
    jobs: it never scans the table for the few it is given."""
    q = Queries(SCHEMA)
    claimed = await _claimed_on_stale_statistics(dsn, q, pending=20_000, batch=5)
    params = q._complete_params("someone-else", [(j.id, j.lease.token) for j in claimed], None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        plan = _generic_plan_run(conn, named_queries(SCHEMA)["job_complete_unsettled"], params)
    assert _indexes_reaching(plan, "j") == {"jobs_pkey"}, json.dumps(plan)
    scans = [(n.get("Node Type"), n.get("Relation Name")) for n in _nodes(plan)]
    assert ("Seq Scan", "jobs") not in scans, json.dumps(plan)


async def _claimed_on_stale_statistics(dsn: str, q: Queries, *, pending: int, batch: int) -> list[Any]:
    """`batch` jobs claimed from `pending` loaded after the table's statistics were taken empty."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")
    await _load(dsn, pending)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        return await q.job_claim(
            aconn, queue=QUEUE, owner="x10", limit=batch, default_lease_seconds=30, default_runtime_seconds=60
        )


def _generic_plan_run(
    conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]
) -> dict[str, Any]:
    """EXPLAIN ANALYZE of one run of `statement` on a generic plan, as a worker's prepared
    statement may run, rolled back after: the plan a pooled connection settles on, with its
    actual row counts and loops."""
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    generic = re.sub(r"%\((\w+)\)s", placeholder, statement)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE x10_generic AS {generic}".encode())
        args = ", ".join(pgsql.Literal(params[name]).as_string(conn) for name in numbers)
        row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE x10_generic({args})".encode()).fetchone()
        conn.execute("DEALLOCATE x10_generic")
    assert row is not None
    return row[0][0]["Plan"]  # type: ignore[no-any-return]


def _indexes_reaching(plan: dict[str, Any], alias: str) -> set[str]:
    """The indexes through which the plan reads the rows of `alias` (a bitmap scan's included)."""
    found: set[str] = set()
    for node in _nodes(plan):
        if node.get("Alias") != alias or node["Node Type"] == "ModifyTable":
            continue
        found |= {n["Index Name"] for n in _nodes(node) if "Index Name" in n}
        if node["Node Type"] == "Seq Scan":
            found.add("(sequential scan)")
    return found


async def _small_queue_claim_time(dsn: str) -> float:
    """The baseline: the same claims against a queue holding only what they take."""
    async with Client(dsn, schema=SCHEMA) as client:
        await client.enqueue_copy([JobSpec(task="x10.task", queue=QUEUE) for _ in range(CLAIM_ROUNDS * 10)])
    took = await _time_claims(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {SCHEMA}.jobs WHERE queue = %s", [QUEUE])
    return took


def _buffers(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> int:
    """Shared buffers (hit or read) one execution of `statement` touches, rolled back after."""
    with conn.transaction(force_rollback=True):
        row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


@pytest.mark.slow
async def test_jobs_not_yet_due_cost_the_claim_nothing(dsn: str) -> None:
    """100k jobs due later, at a higher priority than the due ones, in the same queue: the claim reads
    about as many buffers as with none of them (it never walks past them), and the promotion of due
    scheduled jobs is an ordered scan of jobs_scheduled_idx."""
    future = 100_000
    async with Client(dsn, schema=SCHEMA) as client:
        await client.enqueue_copy([JobSpec(task="x10.task", queue=QUEUE) for _ in range(200)])
    sql = named_queries(SCHEMA)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")
        alone = _buffers(conn, sql["job_claim"], _claim_params("alone"))
    async with Client(dsn, schema=SCHEMA) as client:
        await client.enqueue_copy(
            [JobSpec(task="x10.task", queue=QUEUE, priority=10, delay=3600) for _ in range(future)]
        )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")
        behind_future = _buffers(conn, sql["job_claim"], _claim_params("behind-future"))
        promote = {"limit": 1000, "channel": "x10", "now": None}
        for promote_plan in _plans(conn, sql["job_promote_due"], promote):
            _assert_indexed(promote_plan, "jobs_scheduled_idx")
    print(f"\nclaim of 10: {alone} buffers alone, {behind_future} with {future} jobs due later")
    # Walking past the 100k later jobs reads their hundreds of index pages (about 1,060 buffers
    # against 130 before the scheduled state); what remains is the deeper primary key, through
    # which the claim reaches each row it takes (about 3 buffers a row at this size), and heap.
    assert behind_future <= 1.75 * alone, (alone, behind_future)

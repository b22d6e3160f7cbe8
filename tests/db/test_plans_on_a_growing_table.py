"""The worker's per-batch statements keep reaching jobs by primary key when their plan was made
while the planner took the table for small (never analyzed) and the table then grew: a worker's
pooled connections prepare those statements as it starts and reuse the plans, and a plan that
scans jobs would then read the whole table for every claim, completion and heartbeat."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql as pgsql

from _claims import CLAIM_ARGS
from tenure.db.sqlfiles import named_queries

SCHEMA = "tenure"
#: What a worker runs for every claim, completion batch and heartbeat, or at its shutdown.
PER_BATCH = (
    "job_claim",
    "job_claim_by_priority",
    "job_claim_limited",
    "job_complete_many",
    "job_complete_unsettled",
    "lease_check_many",
    "lease_extend_many",
    "lease_release_many",
)


def _generic(statement: str) -> tuple[bytes, list[str]]:
    """`statement` with numbered placeholders, as a prepared statement is planned without its
    values, and the parameter names in their numbers' order."""
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)s", placeholder, statement).encode(), list(numbers)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_per_batch_statements_planned_on_a_new_table_never_scan_jobs(dsn: str) -> None:
    """On a freshly migrated jobs table (never analyzed: the planner assumes ten pages), the
    generic plan of each per-batch statement reaches jobs through an index, never a sequential
    scan."""
    queries = named_queries(SCHEMA)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for name in PER_BATCH:
            generic, params = _generic(queries[name])
            conn.execute(b"PREPARE per_batch AS " + generic)
            nulls = ", ".join(["NULL"] * len(params))
            row = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE per_batch({nulls})".encode()).fetchone()
            conn.execute("DEALLOCATE per_batch")
            assert row is not None
            plan = row[0][0]["Plan"]
            scans = [(n["Node Type"], n.get("Relation Name")) for n in _nodes(plan)]
            assert ("Seq Scan", "jobs") not in scans, f"{name}: {json.dumps(plan)}"


def test_a_claim_planned_on_a_small_table_stays_cheap_as_the_table_grows(dsn: str) -> None:
    """A claim planned while the table held three jobs, run again on the same plan after 30,000
    more have gone through, takes its jobs reading a few dozen buffers (42 when written), not the
    whole table (581 on a plan that scanned it)."""
    generic, params = _generic(named_queries(SCHEMA)["job_claim"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        args = ", ".join(pgsql.Literal(CLAIM_ARGS[name]).as_string(conn) for name in params)
        pending = f"INSERT INTO {SCHEMA}.jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 3)"
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(b"PREPARE claim AS " + generic)
        conn.execute(pending)
        assert len(conn.execute(f"EXECUTE claim({args})".encode()).fetchall()) == 3  # planned now
        conn.execute(
            f"INSERT INTO {SCHEMA}.jobs (queue, task, state, finished_at) "
            "SELECT 'q', 't', 'succeeded', now() FROM generate_series(1, 30000)"
        )
        conn.execute(pending)
        row = conn.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim({args})".encode()
        ).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    assert plan["Actual Rows"] == 3, json.dumps(plan)
    touched = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert touched < 100, f"{touched} buffers: {json.dumps(plan)}"

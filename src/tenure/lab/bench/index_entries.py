"""The index entries one job writes at each step of the drain's path, counted on the schema itself.

A no-op job goes through Tenure's own statements (an insert as the load makes it, the claim, the
fenced completion) in a transaction that is rolled back. After each step, every index of the jobs
table is asked whether the row's new version is in it: a non-partial index holds every version;
a partial one, the versions its predicate admits (evaluated on the row); and an update that the
transaction's statistics count as HOT entered none. The counters of pg_stat_user_tables say how
many updates were HOT in the drain, not which indexes a version entered; this says that, exactly,
for the path every drained job takes."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.db.queries import Queries
from tenure.lab.bench.queries import execute, fetch
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE

OWNER = "bench-index-entries"


async def _entered(conn: AsyncConnection[Any], job_id: int, hot_before: int) -> tuple[list[str], int]:
    """The indexes holding the job's current version, and the transaction's HOT updates so far."""
    counts = (await fetch(conn, SCHEMA, "bench_xact_hot_updates"))[0]
    hot = int(counts["hot"])
    if hot > hot_before:
        return [], hot  # a HOT update: the new version has no index entry of its own
    rows = await fetch(conn, SCHEMA, "bench_indexes_admitting", id=job_id)
    return [r["name"] for r in rows if r["admits"]], hot


async def index_entries(dsn: str) -> dict[str, Any]:
    """Per step (enqueue, claim, completion): the indexes the job's new version entered; the
    entries a job writes in all; and the table's index counts. A count the server refuses is
    reported as not measured, with its reason, and the rest of the run goes on."""
    try:
        return await _counted(dsn)
    except psycopg.Error as exc:
        return {"error": f"the index entries could not be counted: {type(exc).__name__}: {exc}"}


async def _counted(dsn: str) -> dict[str, Any]:
    queries = Queries(SCHEMA)
    async with await connect(dsn) as conn, conn.transaction(force_rollback=True):
        await execute(conn, SCHEMA, "bench_index_admits_function")
        counts = (await fetch(conn, SCHEMA, "bench_table_indexes", table=f"{SCHEMA}.jobs"))[0]
        job_id = int((await fetch(conn, SCHEMA, "bench_sample_insert", queue=QUEUE))[0]["id"])
        steps: dict[str, list[str]] = {}
        steps["enqueue"], hot = await _entered(conn, job_id, 0)
        claimed = await queries.job_claim(
            conn, queue=QUEUE, owner=OWNER, limit=1, only=[job_id],
            default_lease_seconds=30, default_runtime_seconds=600,
        )  # fmt: skip
        if [job.id for job in claimed] != [job_id]:
            return {"error": "the sample job could not be claimed"}
        steps["claim"], hot = await _entered(conn, job_id, hot)
        lease = (job_id, claimed[0].lease.token)
        outcome = await queries.job_complete_many(conn, owner=OWNER, leases=[lease])
        if list(outcome.values()) != ["done"]:
            return {"error": f"the sample job's completion came back {outcome}"}
        steps["completion"], _ = await _entered(conn, job_id, hot)
    return {
        "indexes": int(counts["indexes"]),
        "partial_indexes": int(counts["partial_indexes"]),
        "per_job": sum(len(names) for names in steps.values()),
        "by_step": steps,
    }


def describe(entries: dict[str, Any]) -> str:
    """'enqueue 3 (a, b, c), claim 2 (...), completion 2 (...)'."""
    steps = entries["by_step"].items()
    return ", ".join(f"{step} {len(names)} ({', '.join(names)})" for step, names in steps)

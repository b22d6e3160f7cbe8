"""What the server spends on a job's claim and completion, with nothing else running:
`python -m tenure.lab.bench.statement_cost [--jobs N] [--rounds R]`.

One connection claims and completes N no-op jobs, a batch of 100 at a time, with Tenure's own
statements (job_claim, job_complete_many) and, interleaved round by round, with the raw loop's
(bench_raw_claim, bench_raw_complete), on the same schema after the same COPY load. Per job: the
CPU of the connection's server backend (the scheduler's count, /proc/<pid>/task/*/schedstat, so
the server must run on this machine), the client's own CPU, and the index tuples each index of the
jobs table gave to scans (pg_stat_user_indexes: a statement that wades through dead entries shows
here). No worker, no pool, no event-loop traffic: the figures are the statements' alone, which is
what a change to the SQL or to the schema moves. Medians of the rounds.

Creates the scratch database tenure_bench_<pid>_tenure on the server (--dsn, $TENURE_DSN or the
embedded one) and drops it at the end."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from psycopg import AsyncConnection
from rich.console import Console
from rich.table import Table

from tenure import Tenure
from tenure.db.connect import connect
from tenure.db.queries import Queries
from tenure.lab.bench.cpu import cpu_seconds
from tenure.lab.bench.queries import fetch
from tenure.lab.bench.raw_worker import RawStatements
from tenure.lab.bench.sections import load, reset
from tenure.lab.bench.server import SCHEMA, Databases, check_server
from tenure.lab.bench.tenure_worker import QUEUE, app
from tenure.worker.claimer import claim_terms
from tenure.worker.options import WorkerOptions

BATCH = 100
OWNER = "bench-statement-cost"
STATS_SETTLE = 1.2  # seconds: a backend flushes its counters at most once a second


async def _index_reads(conn: AsyncConnection[Any]) -> dict[str, int]:
    return {r["name"]: int(r["tuples_read"]) for r in await fetch(conn, SCHEMA, "bench_index_reads")}


#: The claim's terms as a worker of the bench's app sends them: the tasks it runs, the lease of
#: each whose own differs from the worker's (none do: tenure.worker.claimer.claim_terms), and a
#: tenth of each batch oldest first.
OPTIONS = WorkerOptions(lease_seconds=30, max_runtime_seconds=600)
TASKS, POLICIES = claim_terms(app.registry, OPTIONS)


async def _tenure_batch(conn: AsyncConnection[Any], queries: Queries) -> int:
    jobs = await queries.job_claim(
        conn,
        queue=QUEUE,
        owner=OWNER,
        limit=BATCH,
        default_lease_seconds=OPTIONS.lease_seconds,
        default_runtime_seconds=OPTIONS.max_runtime_seconds,
        policies=POLICIES,
        tasks=TASKS,
        oldest=BATCH // 10,
    )
    if jobs:
        await queries.job_complete_many(conn, owner=OWNER, leases=[(j.id, j.lease.token) for j in jobs])
    return len(jobs)


async def _drain(dsn: str, jobs: int, raw: bool) -> dict[str, Any]:
    await reset(dsn)
    await load(dsn, jobs)
    await asyncio.sleep(STATS_SETTLE)
    async with await connect(dsn) as conn:
        await conn.set_autocommit(True)
        before = await _index_reads(conn)
    queries, raw_statements = Queries(SCHEMA), RawStatements()
    async with await connect(dsn) as conn:
        await conn.set_autocommit(True)
        backend = conn.info.backend_pid
        server_before, client_before = cpu_seconds(backend), time.process_time()
        started, done = time.perf_counter(), 0
        while True:
            n = await (raw_statements.batch(conn, BATCH, OWNER) if raw else _tenure_batch(conn, queries))
            if not n:
                break
            done += n
        seconds = time.perf_counter() - started
        server_after, client_after = cpu_seconds(backend), time.process_time()
    await asyncio.sleep(STATS_SETTLE)
    async with await connect(dsn) as conn:
        after = await _index_reads(conn)
    per_job = max(done, 1)
    server = None if server_before is None or server_after is None else (server_after - server_before) * 1e6
    return {
        "jobs": done,
        "jobs_per_second": round(done / seconds),
        "server_cpu_us_per_job": None if server is None else round(server / per_job, 1),
        "client_cpu_us_per_job": round((client_after - client_before) * 1e6 / per_job, 1),
        "index_tuples_read_per_job": {
            name: round((after[name] - before.get(name, 0)) / per_job, 1)
            for name in after
            if after[name] != before.get(name, 0)
        },
    }


async def measure(server_dsn: str, jobs: int, rounds: int) -> dict[str, Any]:
    await check_server(server_dsn)
    dbs = Databases(server_dsn)
    try:
        dsn = await dbs.create("tenure", migrated=True)
        runs: dict[str, list[dict[str, Any]]] = {"tenure": [], "raw": []}
        for _ in range(rounds):
            for name in runs:
                runs[name].append(await _drain(dsn, jobs, raw=name == "raw"))
    finally:
        await dbs.drop_all()
    return {"jobs": jobs, "batch": BATCH, "rounds": rounds, **{name: _median(r) for name, r in runs.items()}}


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def middle(key: str) -> Any:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    keys = ("jobs_per_second", "server_cpu_us_per_job", "client_cpu_us_per_job")
    reads = runs[len(runs) // 2]["index_tuples_read_per_job"]
    return {k: middle(k) for k in keys} | {"index_tuples_read_per_job": reads, "runs": runs}


def print_cost(result: dict[str, Any], console: Console) -> None:
    title = (
        f"{result['jobs']:,} no-op jobs, one connection, claim and complete {result['batch']} at a "
        f"time, median of {result['rounds']}"
    )
    table = Table(title=title)
    for col in (
        "statements",
        "jobs/s",
        "server CPU us/job",
        "client CPU us/job",
        "index tuples read per job",
    ):
        table.add_column(
            col, justify="left" if col in ("statements", "index tuples read per job") else "right"
        )
    for name in ("tenure", "raw"):
        r = result[name]
        reads = ", ".join(f"{k} {v:g}" for k, v in sorted(r["index_tuples_read_per_job"].items()))
        server = "-" if r["server_cpu_us_per_job"] is None else f"{r['server_cpu_us_per_job']:.1f}"
        label = "Tenure's" if name == "tenure" else "the raw loop's"
        table.add_row(
            label, f"{r['jobs_per_second']:,.0f}", server, f"{r['client_cpu_us_per_job']:.1f}", reads
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.lab.bench.statement_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--dsn", default=None, help="server to use (default: $TENURE_DSN or the embedded one)"
    )
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    server = Tenure(args.dsn).resolved_dsn()
    result = asyncio.run(measure(server, args.jobs, args.rounds))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_cost(result, Console())


if __name__ == "__main__":
    main()

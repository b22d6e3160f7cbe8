"""The longest stall an upgrade from the first schema version to the last causes under live load.

Usage: PYTHONPATH=src python benchmarks/upgrade_stall.py [ADMIN_DSN] [JOBS]
Creates the database tenure_upgrade_bench on the server of ADMIN_DSN (default the local
postgres), migrates it to version 1, fills it with JOBS jobs (default 1,000,000: 90% succeeded,
10% pending on a backlog queue), then runs a load of one producer (a one-row INSERT per
transaction), one claimer and one completer (each a one-row UPDATE), written in the columns of
version 1 so that they run on every version. It measures the load twice for the same length of
time: first with nothing else going on (the baseline), then while `migrate` brings the schema to
the last version. It prints each statement kind's longest and 99th-percentile latency in both
phases, and the migration's own duration, then drops the database.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import psycopg
from psycopg import AsyncConnection, conninfo

from tenure.db.migrate import latest_version, migrate

ADMIN = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
DB = "tenure_upgrade_bench"

ENQUEUE = "INSERT INTO tenure.jobs (queue, task, payload) VALUES ('load', 'bench.job', '{\"n\": 1}')"
CLAIM = """
UPDATE tenure.jobs SET state = 'running', lease_owner = 'bench', lease_token = lease_token + 1,
       attempt_count = attempt_count + 1, attempted_at = now(),
       lease_expires_at = now() + interval '30 seconds', lease_deadline = now() + interval '60 seconds'
WHERE id = (SELECT id FROM tenure.jobs WHERE state = 'pending' AND queue = 'load'
            ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id"""
COMPLETE = """
UPDATE tenure.jobs SET state = 'succeeded', finished_at = now(), lease_owner = NULL,
       lease_expires_at = NULL, lease_deadline = NULL
WHERE id = %s AND state = 'running'"""
FILL = """
INSERT INTO tenure.jobs (queue, task, state, attempt_count, lease_token, attempted_at, finished_at, priority,
                         available_at)
SELECT CASE WHEN n %% 10 = 0 THEN 'backlog' ELSE 'old' END, 'bench.old',
       CASE WHEN n %% 10 = 0 THEN 'pending' ELSE 'succeeded' END::tenure.job_state,
       CASE WHEN n %% 10 = 0 THEN 0 ELSE 1 END, CASE WHEN n %% 10 = 0 THEN 0 ELSE 1 END,
       CASE WHEN n %% 10 = 0 THEN NULL ELSE now() END, CASE WHEN n %% 10 = 0 THEN NULL ELSE now() END,
       n %% 5, now() + CASE WHEN n %% 1000 = 0 THEN interval '1 day' ELSE interval '0' END
FROM generate_series(1, %s) AS n"""


def with_db(dsn: str, name: str) -> str:
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = name
    return conninfo.make_conninfo(**params)


async def load(dsn: str, stop: asyncio.Event) -> dict[str, list[float]]:
    """Runs the three statements in turn until `stop`; each one's latencies in seconds."""
    timings: dict[str, list[float]] = {"enqueue": [], "claim": [], "complete": []}
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            started = time.perf_counter()
            await conn.execute(ENQUEUE)
            timings["enqueue"].append(time.perf_counter() - started)
            started = time.perf_counter()
            row = await (await conn.execute(CLAIM)).fetchone()
            timings["claim"].append(time.perf_counter() - started)
            if row is not None:
                started = time.perf_counter()
                await conn.execute(COMPLETE, row)
                timings["complete"].append(time.perf_counter() - started)
            await asyncio.sleep(0.002)
    return timings


def describe(timings: dict[str, list[float]]) -> dict[str, tuple[float, float, int]]:
    out = {}
    for kind, values in timings.items():
        ordered = sorted(values)
        p99 = ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0
        out[kind] = (max(ordered, default=0.0), p99, len(ordered))
    return out


async def main() -> None:
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    dsn = with_db(ADMIN, DB)
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
            await migrate(conn, "tenure", up_to=1)
            started = time.perf_counter()
            await conn.execute(FILL, [JOBS])
            await conn.execute("VACUUM ANALYZE tenure.jobs")
            print(f"filled {JOBS:,} jobs at version 1 in {time.perf_counter() - started:.1f}s")

            upgrade_started = time.perf_counter()
            stop = asyncio.Event()
            during = asyncio.create_task(load(dsn, stop))
            report = await migrate(conn, "tenure")
            upgrade_took = time.perf_counter() - upgrade_started
            stop.set()
            upgraded = describe(await during)
            assert report.current == latest_version()

            stop = asyncio.Event()
            baseline_task = asyncio.create_task(load(dsn, stop))
            await asyncio.sleep(upgrade_took)
            stop.set()
            baseline = describe(await baseline_task)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")

    print(f"upgrade 1 -> {latest_version()} ({len(report.applied)} migrations) took {upgrade_took:.1f}s")
    print(
        f"{'statement':<10} {'longest, upgrading':>19} {'longest, baseline':>18} "
        f"{'p99 up / base':>16} {'count':>12}"
    )
    for kind in ("enqueue", "claim", "complete"):
        up_max, up_p99, up_n = upgraded[kind]
        base_max, base_p99, base_n = baseline[kind]
        print(
            f"{kind:<10} {up_max * 1000:>16.1f} ms {base_max * 1000:>15.1f} ms "
            f"{up_p99 * 1000:>6.1f} / {base_p99 * 1000:<5.1f}ms {up_n:>6} / {base_n}"
        )
    worst = max(upgraded[k][0] for k in upgraded)
    print(
        f"longest stall while upgrading: {worst * 1000:.0f} ms "
        f"({worst / max(max(baseline[k][0] for k in baseline), 1e-9):.1f}x the baseline's longest)"
    )


if __name__ == "__main__":
    asyncio.run(main())

"""The dashboard overview's cost over a table of 10M finished jobs.

Usage: PYTHONPATH=src python benchmarks/overview_10m.py [ADMIN_DSN] [--jobs N] [--keep]

Creates the database tenure_overview_bench on the server of ADMIN_DSN (default the local
postgres), migrates it, and fills it in one INSERT ... SELECT generate_series with N finished
jobs (default 10,000,000: 95% succeeded, 3% cancelled, 2% dead, over five queues, finished
evenly over the last 30 days, so about 14,000 in the last hour), then 1,000 pending and 20
running jobs, and VACUUM ANALYZE. Then it times, through the ASGI app (no network), the
overview's live part (what each open tab fetches every 5 s) and the whole overview page, median
of 5 after one warm-up, and each of the overview's statements on its own. It drops the database
afterwards unless --keep.

Run it against an older checkout (PYTHONPATH pointing at that one's src) to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo
from starlette.testclient import TestClient

from tenure.db.migrate import migrate
from tenure.db.ops_queries import OpsQueries
from tenure.ops.dashboard import create_app
from tenure.ops.dashboard.queries import DashboardQueries

DATABASE = "tenure_overview_bench"
RUNS = 5
_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def statements_of(path: Path) -> dict[str, str]:
    """The `-- name:` sections of the benchmark's .sql file, by name, without their comment lines
    (psycopg would read a percent sign in them as a placeholder)."""
    parts = _NAME.split(path.read_text(encoding="utf-8"))
    return {
        name: "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--")).strip()
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


SQL = statements_of(Path(__file__).with_suffix(".sql"))


def dsn_of(admin: str, name: str) -> str:
    return conninfo.make_conninfo(admin, dbname=name)


def seed(admin: str, jobs: int) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(SQL["database_drop"])
        conn.execute(SQL["database_create"])

    async def schema() -> None:
        async with await psycopg.AsyncConnection.connect(dsn_of(admin, DATABASE), autocommit=True) as c:
            await migrate(c, "tenure")

    asyncio.run(schema())
    with psycopg.connect(dsn_of(admin, DATABASE), autocommit=True) as conn:
        conn.execute(SQL["fill_settings"])
        start = time.perf_counter()
        conn.execute(SQL["fill_finished"], {"jobs": jobs})
        conn.execute(SQL["fill_waiting"])
        conn.execute(SQL["fill_running"])
        filled = time.perf_counter() - start
        conn.execute(SQL["vacuum"])
        vacuumed = time.perf_counter() - start - filled
        print(f"filled {jobs:,} finished jobs in {filled:.0f} s, vacuumed and analyzed in {vacuumed:.0f} s")


def median_ms(run: Callable[[], Any]) -> float:
    run()  # warm-up: plans, caches
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def statements(dsn: str) -> dict[str, float]:
    """Each statement the overview runs, on its own: the ones this checkout has."""
    ops, pages = OpsQueries("tenure"), DashboardQueries("tenure")
    calls: dict[str, Callable[[psycopg.AsyncConnection[Any]], Awaitable[Any]]] = {
        "gauges (one snapshot)": lambda c: ops.snapshot(c, stale_seconds=60.0),
        "workers": lambda c: ops.worker_list(c),
        "finished in the last hour (chart)": lambda c: ops.finished_recent(c, minutes=60),
        "trouble in the last hour (chart)": lambda c: pages.trouble_recent(c, minutes=60),
    }
    if hasattr(pages, "queue_counts"):
        calls["counts by queue and state"] = lambda c: pages.queue_counts(c)

    async def timed() -> dict[str, float]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            found = {}
            for label, call in calls.items():
                await call(conn)
                times = []
                for _ in range(RUNS):
                    start = time.perf_counter()
                    await call(conn)
                    times.append(time.perf_counter() - start)
                found[label] = statistics.median(times) * 1000
            return found

    return asyncio.run(timed())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("admin", nargs="?", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--keep", action="store_true", help="leave the database for a second run")
    parser.add_argument("--reuse", action="store_true", help="time the database a --keep run left")
    args = parser.parse_args()
    dsn = dsn_of(args.admin, DATABASE)
    try:
        if not args.reuse:
            seed(args.admin, args.jobs)
        with TestClient(create_app(dsn), base_url="http://127.0.0.1") as http:
            for path in ("/overview/live", "/"):
                assert http.get(path).status_code == 200, path
            live = median_ms(lambda: http.get("/overview/live"))
            page = median_ms(lambda: http.get("/"))
        print(f"{'overview, live part (every 5 s per tab)':44} {live:8.0f} ms")
        print(f"{'overview, whole page':44} {page:8.0f} ms")
        for label, ms in statements(dsn).items():
            print(f"  {label:42} {ms:8.1f} ms")
    finally:
        if not args.keep:
            with psycopg.connect(args.admin, autocommit=True) as conn:
                conn.execute(SQL["database_drop"])


if __name__ == "__main__":
    main()

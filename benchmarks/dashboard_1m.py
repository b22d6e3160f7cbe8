"""Render times of the dashboard's pages over 1M jobs (950k finished, 50k pending).

Usage: PYTHONPATH=src python benchmarks/dashboard_1m.py [ADMIN_DSN]
Creates the database tenure_dash_bench on the server of ADMIN_DSN (default the local postgres),
fills it, times each page 5 times through the ASGI app (no network), and drops it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import psycopg
from psycopg import conninfo
from starlette.testclient import TestClient

from tenure.dashboard import create_app

ADMIN = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
NAME = "tenure_dash_bench"
DSN = conninfo.make_conninfo(ADMIN, dbname=NAME)
PAGES = {
    "overview": "/",
    "jobs, first page": "/jobs",
    "jobs, queue and state": "/jobs?queue=q3&state=pending",
    "jobs, payload with 100 matches": '/jobs?payload={"customer_id":%207}',
    "jobs, payload with 1 old match": '/jobs?payload={"n":%2012345}',
    "jobs, a deep page": "/jobs?before=1000",
}


def seed() -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {NAME}")
    subprocess.run(
        [sys.executable, "-m", "tenure.cli", "migrate", "--dsn", DSN], check=True, capture_output=True
    )
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, payload, state, finished_at, attempt_count, lease_token) "
            "SELECT 'q' || (i % 5), 't' || (i % 20), jsonb_build_object('customer_id', i % 10000, 'n', i), "
            "'succeeded', now(), 1, 1 FROM generate_series(1, 950000) i"
        )
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, payload) "
            "SELECT 'q' || (i % 5), 't' || (i % 20), jsonb_build_object('customer_id', i % 10000, 'n', i) "
            "FROM generate_series(1, 50000) i"
        )
        conn.execute("VACUUM ANALYZE tenure.jobs")


def main() -> None:
    seed()
    try:
        with TestClient(create_app(DSN)) as http:
            for label, path in PAGES.items():
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    assert http.get(path).status_code == 200
                    times.append(time.perf_counter() - start)
                print(f"{label:34} median {statistics.median(times) * 1000:6.0f} ms")
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")


if __name__ == "__main__":
    main()

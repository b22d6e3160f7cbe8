"""Render times of the dashboard's pages over 1M jobs, against the same pages over 1k jobs.

Usage: PYTHONPATH=src python benchmarks/dashboard_1m.py [ADMIN_DSN]
Creates the databases tenure_dash_bench (1M jobs: 930k succeeded, 20k dead, 50k pending, 100k
audit events in the last hour) and tenure_dash_base (the same shape at 1/1000) on the server of
ADMIN_DSN (default the local postgres), times each page 5 times through the ASGI app (no
network), prints the medians and their ratio, and drops both.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import psycopg
from psycopg import conninfo
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app

ADMIN = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
BENCH = ("tenure_dash_bench", 1_000_000)
BASE = ("tenure_dash_base", 1_000)
PAGES = {
    "overview": "/",
    "jobs, first page": "/jobs",
    "jobs, queue and state": "/jobs?queue=q3&state=pending",
    "jobs, payload with many matches": '/jobs?payload={"customer_id":%207}',
    "jobs, payload with 1 old match": '/jobs?payload={"n":%2012}',
    "jobs, ordering key": "/jobs?ordering_key=k10",
    "jobs, older than 30 min": "/jobs?older_than=30m",
    "jobs, a deep page": "/jobs?before=1000",
    "dead jobs": "/dead",
    "dead jobs, by error code": "/dead?error_code=E3",
    "blocked ordering keys": "/ordering",
    "uncertain effects": "/effects",
}


def dsn_of(name: str) -> str:
    return conninfo.make_conninfo(ADMIN, dbname=name)


def seed(name: str, jobs: int) -> None:
    scale = jobs / 1_000_000
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    subprocess.run(
        [sys.executable, "-m", "tenure.ops.cli", "migrate", "--dsn", dsn_of(name)],
        check=True,
        capture_output=True,
    )
    payload = "jsonb_build_object('customer_id', i %% 10000, 'n', i)"
    with psycopg.connect(dsn_of(name), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, payload, state, finished_at, attempt_count, lease_token, "
            f"created_at) SELECT 'q' || (i %% 5), 't' || (i %% 20), {payload}, 'succeeded', now(), 1, 1, "
            "now() - interval '2 hours' + i * interval '1 millisecond' FROM generate_series(1, %s) i",
            (int(930_000 * scale),),
        )
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, payload, state, finished_at, attempt_count, lease_token, "
            "last_error_code, last_error, ordering_key) SELECT 'q' || (i %% 5), 't' || (i %% 20), "
            f"{payload}, 'dead', now() - i * interval '1 second', 3, 3, 'E' || (i %% 7), 'it failed', "
            "CASE WHEN i %% 10 = 0 THEN 'dk' || i END FROM generate_series(1, %s) i",
            (int(20_000 * scale),),
        )
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, payload, ordering_key) "
            f"SELECT 'q' || (i %% 5), 't' || (i %% 20), {payload}, "
            "CASE WHEN i %% 10 = 0 THEN 'k' || (i %% 500) END FROM generate_series(1, %s) i",
            (int(50_000 * scale),),
        )
        conn.execute(
            "INSERT INTO tenure.job_events (job_id, event, token, at) "
            "SELECT i, (ARRAY['retry', 'lease_expired', 'fencing_lost'])[1 + i %% 3], 1, "
            "now() - (i %% 3600) * interval '1 second' FROM generate_series(1, %s) i",
            (int(100_000 * scale),),
        )
        conn.execute(
            "INSERT INTO tenure.job_effects (job_id, name, state, token) "
            "SELECT id, 'charge', 'uncertain', 3 FROM tenure.jobs WHERE state = 'dead' LIMIT %s",
            (max(1, int(500 * scale)),),
        )
        conn.execute("VACUUM ANALYZE")


def timed(name: str) -> dict[str, float]:
    medians = {}
    with TestClient(create_app(dsn_of(name)), base_url="http://127.0.0.1") as http:
        for label, path in PAGES.items():
            times = []
            for _ in range(5):
                start = time.perf_counter()
                assert http.get(path).status_code == 200, path
                times.append(time.perf_counter() - start)
            medians[label] = statistics.median(times)
    return medians


def main() -> None:
    try:
        for name, jobs in (BASE, BENCH):
            seed(name, jobs)
        base, bench = timed(BASE[0]), timed(BENCH[0])
        print(f"{'page':34} {'1k jobs':>9} {'1M jobs':>9} {'ratio':>7}")
        for label in PAGES:
            print(
                f"{label:34} {base[label] * 1000:7.0f}ms {bench[label] * 1000:7.0f}ms "
                f"{bench[label] / base[label]:6.1f}x"
            )
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            for name, _ in (BASE, BENCH):
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()

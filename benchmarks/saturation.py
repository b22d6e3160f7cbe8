"""Where one PostgreSQL on this machine saturates: drain throughput of no-op jobs against the
number of worker processes, connected directly and through PgBouncer in transaction mode, with
the server connections each setup used. The baseline is one worker, direct, in the same run.

Usage: PYTHONPATH=src:tests/scaleout python benchmarks/saturation.py [ADMIN_DSN] [JOBS]
Creates the database tenure_saturation on the server of ADMIN_DSN (default the local pg15),
starts a PgBouncer in front of it (pool of 20 server connections), and drops both at the end.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import psycopg
from _bouncer import launch_pgbouncer
from psycopg import conninfo

from tenure.db.connect import connect
from tenure.db.migrate import migrate
from tenure.lab.bench.drain import drain
from tenure.lab.bench.sections import Contenders, load, reset

ADMIN = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
NAME = "tenure_saturation"
DSN = conninfo.make_conninfo(ADMIN, dbname=NAME)
PROCESSES = (1, 2, 4, 8)
CONCURRENCY = 50
BOUNCER_POOL = 20


async def peak_connections(stop: asyncio.Event) -> int:
    """The most server sessions of this database seen at once, sampled every 50 ms."""
    peak = 0
    async with await psycopg.AsyncConnection.connect(ADMIN, autocommit=True) as conn:
        while not stop.is_set():
            row = await (
                await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (NAME,))
            ).fetchone()
            peak = max(peak, int(row[0]) if row else 0)
            await asyncio.sleep(0.05)
    return peak


async def one(contenders: Contenders, workers_dsn: str, processes: int, pooled: bool) -> tuple[float, int]:
    await reset(DSN)
    await load(DSN, JOBS)
    stop = asyncio.Event()
    sampling = asyncio.create_task(peak_connections(stop))
    env = {"TENURE_PREPARE_THRESHOLD": "none"} if pooled else {}
    group = contenders.tenure(workers_dsn, processes, env)
    # No start gate, for either setup alike: sessions waiting at it would hold every server
    # connection of PgBouncer's pool before all the processes were in.
    result = await drain(DSN, group, timeout=300, gated=False)
    stop.set()
    return result.jobs_per_second, await sampling


async def main() -> None:
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {NAME}")
    try:
        async with await connect(DSN) as conn:
            await migrate(conn, "tenure")
        contenders = Contenders(concurrency=CONCURRENCY, claim_batch=20)
        with (
            tempfile.TemporaryDirectory() as workdir,
            launch_pgbouncer(ADMIN, Path(workdir), pool_size=BOUNCER_POOL) as bouncer,
        ):
            results = {}
            for processes in PROCESSES:
                results[("direct", processes)] = await one(contenders, DSN, processes, pooled=False)
                results[("pgbouncer", processes)] = await one(
                    contenders, bouncer.route(DSN), processes, pooled=True
                )
        base = results[("direct", 1)][0]
        print(f"{JOBS} no-op jobs per run, {CONCURRENCY} slots per worker; baseline: 1 worker, direct")
        print(f"{'setup':12} {'workers':>7} {'jobs/s':>8} {'ratio':>6} {'server conns':>13}")
        for (via, processes), (rate, conns) in results.items():
            print(f"{via:12} {processes:7} {rate:8.0f} {rate / base:6.2f} {conns:13}")
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")


if __name__ == "__main__":
    asyncio.run(main())

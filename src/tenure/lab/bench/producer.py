"""A producer process of the end-to-end section:
`python -m tenure.lab.bench.producer {tenure,raw} --dsn ... --jobs N --connections C`.

It opens its C connections first, then each enqueues one job per transaction until the process
has sent N in all, and exits. `tenure` enqueues through `Client.enqueue` on the producer's own
connection, as an application enqueues inside its own transaction; `raw` runs one plain INSERT
(bench_raw_insert), the least a hand-written queue would do."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection

from tenure import Client
from tenure.db.connect import connect
from tenure.lab.bench.cpu import backend_cpu_seconds
from tenure.lab.bench.procs import PROCESS_NAME_ENV, process_dsn
from tenure.lab.bench.queries import bench_queries, fetch
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE

KINDS = ("tenure", "raw")
#: A directory where each producer writes, on its way out, the CPU it and its server backends
#: spent sending its jobs (`<process name>.json`), for the end-to-end section's per-job costs.
REPORT_DIR_ENV = "TENURE_BENCH_PRODUCER_REPORTS"


async def _tenure(conn: AsyncConnection[Any], count: int, client: Client) -> None:
    for _ in range(count):
        await client.enqueue("noop", queue=QUEUE, conn=conn)


async def _raw(conn: AsyncConnection[Any], count: int) -> None:
    insert = bench_queries(SCHEMA)["bench_raw_insert"].encode()
    for _ in range(count):
        await conn.execute(insert, {"queue": QUEUE}, prepare=True)


async def run(kind: str, dsn: str, jobs: int, connections: int) -> None:
    named = process_dsn(dsn)
    conns = await asyncio.gather(*(connect(named) for _ in range(connections)))
    shares = [jobs // connections + (1 if i < jobs % connections else 0) for i in range(connections)]
    # Every enqueue is given a connection; the client's own pool only sends the wake-ups after.
    client = Client(named, schema=SCHEMA)
    backends = [await _backend_pid(c) for c in conns]
    # From here on the producer only waits at the start gate, then sends: start-up is behind us.
    own_before, server_before = _own_cpu_seconds(), backend_cpu_seconds(backends)
    try:
        if kind == "tenure":
            await asyncio.gather(*(_tenure(c, n, client) for c, n in zip(conns, shares, strict=True)))
        else:
            await asyncio.gather(*(_raw(c, n) for c, n in zip(conns, shares, strict=True)))
        server_after = backend_cpu_seconds(backends)  # before the connections close
        _report(
            jobs,
            _own_cpu_seconds() - own_before,
            sum(server_after.values()) - sum(server_before.values()) if server_after else None,
        )
    finally:
        await client.close()  # its wake-ups sent before the process goes
        for conn in conns:
            await conn.close()


async def _backend_pid(conn: AsyncConnection[Any]) -> int:
    return int((await fetch(conn, SCHEMA, "bench_backend_pid"))[0]["pid"])


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _report(jobs: int, cpu_seconds: float, server_cpu_seconds: float | None) -> None:
    directory = os.environ.get(REPORT_DIR_ENV)
    if directory:
        report = {"jobs": jobs, "cpu_seconds": cpu_seconds, "server_cpu_seconds": server_cpu_seconds}
        name = os.environ.get(PROCESS_NAME_ENV, str(os.getpid()))
        Path(directory, f"{name}.json").write_text(json.dumps(report), encoding="ascii")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--connections", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(run(args.kind, args.dsn, args.jobs, args.connections))


if __name__ == "__main__":
    main()

"""A producer process of the end-to-end section:
`python -m tenure.bench.producer {tenure,raw} --dsn ... --jobs N --connections C`.

It opens its C connections first, then each enqueues one job per transaction until the process
has sent N in all, and exits. `tenure` enqueues through `Client.enqueue` on the producer's own
connection, as an application enqueues inside its own transaction; `raw` runs one plain INSERT
(bench_raw_insert), the least a hand-written queue would do."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from psycopg import AsyncConnection

from tenure.bench.procs import process_dsn
from tenure.bench.queries import bench_queries
from tenure.bench.server import SCHEMA
from tenure.bench.tenure_worker import QUEUE
from tenure.client import Client
from tenure.db.connect import connect

KINDS = ("tenure", "raw")


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
    client = Client(named, schema=SCHEMA)  # never opens its pool: every enqueue is given a connection
    try:
        if kind == "tenure":
            await asyncio.gather(*(_tenure(c, n, client) for c, n in zip(conns, shares, strict=True)))
        else:
            await asyncio.gather(*(_raw(c, n) for c, n in zip(conns, shares, strict=True)))
    finally:
        for conn in conns:
            await conn.close()


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

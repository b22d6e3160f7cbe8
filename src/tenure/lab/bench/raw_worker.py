"""The ceiling: the minimal loop a hand-written worker would run on Tenure's schema.

`python -m tenure.lab.bench.raw_worker --dsn ... --batch N --loops K` runs K loops, each on its own
connection: claim N with SKIP LOCKED, then complete them in one fenced unnest update. No executor,
no heartbeat. K loops keep as many batches in flight as a Tenure worker's slots hold
(concurrency / claim batch), so commits overlap and share WAL flushes the same way. It runs with the
garbage collector's setting a Tenure worker process runs with (tenure.worker.collector), as the
peers do."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.lab.bench.procs import process_dsn
from tenure.lab.bench.queries import bench_queries
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE
from tenure.worker.collector import young_generation_widened
from tenure.worker.event_loop import run_on


class RawStatements:
    """The raw loop's claim and fenced completion, prepared on first use."""

    def __init__(self) -> None:
        queries = bench_queries(SCHEMA)
        self.claim = queries["bench_raw_claim"].encode()
        self.complete = queries["bench_raw_complete"].encode()

    async def batch(self, conn: AsyncConnection[Any], size: int, owner: str) -> int:
        """Claims up to `size` jobs and completes them: how many it took."""
        cur = await conn.execute(self.claim, {"queue": QUEUE, "limit": size, "owner": owner}, prepare=True)
        rows = await cur.fetchall()
        if rows:
            params = {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows], "owner": owner}
            await conn.execute(self.complete, params, prepare=True)
        return len(rows)


async def loop(dsn: str, batch: int, owner: str, stopping: asyncio.Event) -> None:
    statements = RawStatements()
    async with await connect(dsn) as conn:
        while not stopping.is_set():
            if not await statements.batch(conn, batch, owner):
                await asyncio.sleep(0.01)


async def run(dsn: str, batch: int, loops: int) -> None:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    owner = f"raw:{os.getpid()}"
    named = process_dsn(dsn)
    await asyncio.gather(*(loop(named, batch, owner, stopping) for _ in range(loops)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--loops", type=int, default=1)
    args = parser.parse_args()
    with young_generation_widened():
        run_on(None, run(args.dsn, args.batch, args.loops))


if __name__ == "__main__":
    main()

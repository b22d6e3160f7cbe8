"""The ceiling: the minimal loop a hand-written worker would run on Tenure's schema.

`python -m tenure.lab.bench.raw_worker --dsn ... --batch N --loops K` runs K loops, each on its own
connection: claim N with SKIP LOCKED, then complete them in one fenced unnest update. No executor,
no heartbeat. K loops keep as many batches in flight as a Tenure worker's slots hold
(concurrency / claim batch), so commits overlap and share WAL flushes the same way."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from tenure.db.connect import connect
from tenure.lab.bench.procs import process_dsn
from tenure.lab.bench.queries import bench_queries
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE
from tenure.worker.event_loop import run_on


async def loop(dsn: str, batch: int, owner: str, stopping: asyncio.Event) -> None:
    queries = bench_queries(SCHEMA)
    claim, complete = queries["bench_raw_claim"].encode(), queries["bench_raw_complete"].encode()
    async with await connect(dsn) as conn:
        while not stopping.is_set():
            cur = await conn.execute(claim, {"queue": QUEUE, "limit": batch, "owner": owner}, prepare=True)
            rows = await cur.fetchall()
            if not rows:
                await asyncio.sleep(0.01)
                continue
            ids, tokens = [r[0] for r in rows], [r[1] for r in rows]
            await conn.execute(complete, {"ids": ids, "tokens": tokens, "owner": owner}, prepare=True)


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
    run_on(None, run(args.dsn, args.batch, args.loops))


if __name__ == "__main__":
    main()

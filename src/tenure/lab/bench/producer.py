"""A producer process of the end-to-end section:
`python -m tenure.lab.bench.producer {tenure,raw,pgqueuer} --dsn ... --jobs N --connections C`.

It opens its C connections first, then each enqueues one job per transaction until the process
has sent N in all, and exits. `tenure` enqueues through `Client.enqueue` on the producer's own
connection, as an application enqueues inside its own transaction; `raw` runs one plain INSERT
(bench_raw_insert), the least a hand-written queue would do; `pgqueuer` calls PgQueuer's own
enqueue (`Queries.enqueue`) with one job, on a connection of PgQueuer's driver."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection

from tenure import Client
from tenure.db.connect import connect
from tenure.lab.bench import peers
from tenure.lab.bench.cpu import backend_cpu_seconds
from tenure.lab.bench.procs import PROCESS_NAME_ENV, process_dsn
from tenure.lab.bench.queries import bench_queries, fetch
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE
from tenure.worker.event_loop import run_on

KINDS = ("tenure", "raw", "pgqueuer")
#: A directory where each producer writes, on its way out, the CPU it and its server backends
#: spent sending its jobs (`<process name>.json`), for the end-to-end section's per-job costs.
REPORT_DIR_ENV = "TENURE_BENCH_PRODUCER_REPORTS"

#: Enqueues this many jobs, one per transaction, one after another.
Send = Callable[[int], Awaitable[None]]


@contextlib.asynccontextmanager
async def _psycopg_line(kind: str, dsn: str, client: Client) -> AsyncIterator[tuple[Send, int]]:
    async with await connect(dsn) as conn:
        if kind == "tenure":

            async def send(count: int) -> None:
                for _ in range(count):
                    await client.enqueue("noop", queue=QUEUE, conn=conn)

        else:
            insert = bench_queries(SCHEMA)["bench_raw_insert"].encode()

            async def send(count: int) -> None:
                for _ in range(count):
                    await conn.execute(insert, {"queue": QUEUE}, prepare=True)

        yield send, await _backend_pid(conn)


@contextlib.asynccontextmanager
async def _pgqueuer_line(dsn: str) -> AsyncIterator[tuple[Send, int]]:
    async with peers.pgqueuer_session(dsn) as (queries, backend):

        async def send(count: int) -> None:
            for _ in range(count):
                await peers.pgqueuer_enqueue_one(queries)

        yield send, backend


def _line(kind: str, dsn: str, client: Client) -> contextlib.AbstractAsyncContextManager[tuple[Send, int]]:
    """One connection of the producer: how it sends its jobs, and its server backend."""
    return _pgqueuer_line(dsn) if kind == "pgqueuer" else _psycopg_line(kind, dsn, client)


async def run(kind: str, dsn: str, jobs: int, connections: int) -> None:
    named = process_dsn(dsn)
    shares = [jobs // connections + (1 if i < jobs % connections else 0) for i in range(connections)]
    # Every enqueue is given a connection; the client's own pool only sends the wake-ups after.
    client = Client(named, schema=SCHEMA)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(client.close)  # its wake-ups sent before the process goes
        lines = [await stack.enter_async_context(_line(kind, named, client)) for _ in range(connections)]
        backends = [backend for _, backend in lines]
        # From here on the producer only waits at the start gate, then sends: start-up is behind us.
        own_before, server_before = _own_cpu_seconds(), backend_cpu_seconds(backends)
        await asyncio.gather(*(send(n) for (send, _), n in zip(lines, shares, strict=True)))
        server_after = backend_cpu_seconds(backends)  # before the connections close
        _report(
            jobs,
            _own_cpu_seconds() - own_before,
            sum(server_after.values()) - sum(server_before.values()) if server_after else None,
        )


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
    run_on(None, run(args.kind, args.dsn, args.jobs, args.connections))


if __name__ == "__main__":
    main()

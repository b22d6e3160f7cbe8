"""PgQueuer and Procrastinate on the same server, each in its own database, each set up as its
documentation recommends for throughput. Worker processes: `python -m tenure.lab.bench.peers NAME`.

PgQueuer: the asyncpg driver, `batch_size` swept by the benchmark (its best stands), and
`max_concurrent_tasks` exactly twice the batch, the least PgQueuer accepts, so that the batch
size alone sets how many of its jobs a process holds.
Procrastinate: async tasks, LISTEN/NOTIFY, and a pool sized for the worker's concurrency: its
docs ("Mind the size of your PostgreSQL pool") say that the shorter the jobs, the more the pool
needs as many connections as the concurrency, plus one; the listening connection is apart.
Both run with the garbage collector's setting a Tenure worker process runs with
(tenure.worker.collector), as they would run on uvloop if Tenure's did: a setting of the process,
which any program can make, is not counted as Tenure's advantage."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import conninfo

from tenure.lab.bench import probe
from tenure.lab.bench.procs import process_dsn
from tenure.lab.bench.tenure_worker import QUEUE
from tenure.worker.collector import young_generation_widened
from tenure.worker.event_loop import run_on

PEERS = ("pgqueuer", "procrastinate")
ENQUEUE_CHUNK = 5000
#: A fragment of each peer's claim statement, by which the start gate sees it waiting (gate.py).
CLAIM_MARKERS = {"pgqueuer": "next_queued", "procrastinate": "procrastinate_fetch_job"}
#: Sessions the server keeps for superusers, and those the benchmark itself may hold at once.
RESERVED_CONNECTIONS = 3 + 10


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def version(name: str) -> str:
    from importlib.metadata import version as dist_version

    return dist_version(name)


# --- PgQueuer: asyncpg driver (its recommended one) when present, batch dequeue. ---


async def _pgqueuer_connection(dsn: str) -> tuple[Any, int, Callable[[], Awaitable[None]]]:
    """A PgQueuer driver on a connection of its own: the driver, the connection's server backend,
    and how to close it."""
    if installed("asyncpg"):
        asyncpg = importlib.import_module("asyncpg")
        conn = await asyncpg.connect(**_asyncpg_params(dsn))
        return _pgqueuer("db").AsyncpgDriver(conn), int(conn.get_server_pid()), conn.close
    pconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return _pgqueuer("db").PsycopgDriver(pconn), pconn.info.backend_pid, pconn.close


@contextlib.asynccontextmanager
async def pgqueuer_session(dsn: str) -> AsyncIterator[tuple[Any, int]]:
    """PgQueuer's queries on a connection of their own, and that connection's server backend; the
    connection is closed at the end (a session left open would outlive the drain it served)."""
    driver, backend, close = await _pgqueuer_connection(dsn)
    try:
        yield _pgqueuer("queries").Queries(driver), backend
    finally:
        await close()


def _pgqueuer(module: str = "") -> Any:
    """Optional peers are imported by name: they are not dependencies of Tenure."""
    return importlib.import_module("pgqueuer" + (f".{module}" if module else ""))


def _asyncpg_params(dsn: str) -> dict[str, Any]:
    """asyncpg takes URIs only; Tenure's DSNs may be key=value strings with a socket directory."""
    parts = conninfo.conninfo_to_dict(dsn)
    params: dict[str, Any] = {
        "host": parts.get("host"),
        "port": int(str(parts["port"])) if parts.get("port") else None,
        "user": parts.get("user"),
        "password": parts.get("password") or None,
        "database": parts.get("dbname"),
    }
    if parts.get("application_name"):
        params["server_settings"] = {"application_name": parts["application_name"]}
    return {k: v for k, v in params.items() if v is not None}


async def pgqueuer_setup(dsn: str) -> None:
    async with pgqueuer_session(dsn) as (queries, _):
        await queries.install()


async def pgqueuer_enqueue(dsn: str, count: int, *, entrypoint: str = "noop") -> None:
    async with pgqueuer_session(dsn) as (queries, _):
        for start in range(0, count, ENQUEUE_CHUNK):
            n = min(ENQUEUE_CHUNK, count - start)
            await queries.enqueue([entrypoint] * n, [None] * n, [0] * n)


async def pgqueuer_enqueue_one(queries: Any) -> None:
    """One no-op job in a transaction of its own, as an application enqueues with PgQueuer."""
    await queries.enqueue("noop", None, 0)


async def pgqueuer_probe(queries: Any, sent: float) -> None:
    await queries.enqueue("probe", repr(sent).encode(), 0)


def pgqueuer_max_concurrent(batch: int) -> int:
    """Twice the batch: PgQueuer refuses a cap below that, and the sweep is over the batch alone."""
    return 2 * batch


async def pgqueuer_worker(dsn: str, concurrency: int, batch: int) -> None:
    """`concurrency` is not PgQueuer's: its cap follows from the batch (pgqueuer_max_concurrent)."""
    driver, _, _ = await _pgqueuer_connection(process_dsn(dsn))
    pgq = _pgqueuer().PgQueuer(driver)

    async def noop(job: Any) -> None:
        pass

    async def probe_entry(job: Any) -> None:
        probe.record(float(job.payload.decode()))

    pgq.entrypoint("noop")(noop)
    pgq.entrypoint("probe")(probe_entry)

    await pgq.run(batch_size=batch, max_concurrent_tasks=pgqueuer_max_concurrent(batch))


# --- Procrastinate: psycopg connector, async tasks, worker concurrency, LISTEN/NOTIFY. ---


def procrastinate_concurrency(concurrency: int, processes: int, max_connections: int) -> int:
    """The run's concurrency, or less where the server could not give every process a pool of
    concurrency + 1 and its listening connection."""
    per_process = (max_connections - RESERVED_CONNECTIONS) // processes
    return max(1, min(concurrency, per_process - 2))


def procrastinate_app(dsn: str, pool_size: int | None = None) -> Any:
    """The app; `pool_size` sizes the connector's pool (the worker's: concurrency + 1)."""
    procrastinate = importlib.import_module("procrastinate")
    # Its advice to define the app in an importable module does not apply to a benchmark.
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    pool = {"min_size": min(4, pool_size), "max_size": pool_size} if pool_size else {}
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, **pool))

    async def noop() -> None:
        pass

    async def probe_task(sent: float) -> None:
        probe.record(sent)

    app.task(name="noop", queue=QUEUE)(noop)
    app.task(name="probe", queue=QUEUE)(probe_task)

    return app


async def procrastinate_setup(dsn: str) -> None:
    app = procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def procrastinate_enqueue(dsn: str, count: int) -> None:
    app = procrastinate_app(dsn)
    async with app.open_async():
        task = app.tasks["noop"]
        for start in range(0, count, ENQUEUE_CHUNK):
            await task.batch_defer_async(*[{}] * min(ENQUEUE_CHUNK, count - start))


async def procrastinate_worker(dsn: str, concurrency: int, batch: int) -> None:
    app = procrastinate_app(process_dsn(dsn), pool_size=concurrency + 1)
    async with app.open_async():
        await app.run_worker_async(queues=[QUEUE], concurrency=concurrency, install_signal_handlers=True)


SETUP = {"pgqueuer": pgqueuer_setup, "procrastinate": procrastinate_setup}
ENQUEUE = {"pgqueuer": pgqueuer_enqueue, "procrastinate": procrastinate_enqueue}
WORKERS = {"pgqueuer": pgqueuer_worker, "procrastinate": procrastinate_worker}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("peer", choices=PEERS)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args()
    with young_generation_widened():
        run_on(None, WORKERS[args.peer](args.dsn, args.concurrency, args.batch))


if __name__ == "__main__":
    main()

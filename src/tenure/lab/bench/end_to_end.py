"""End to end: producers enqueue one job per transaction while the workers drain, all started
behind one gate; the rate is the jobs enqueued, from the gate's opening to the last of them
finished. Tenure (Client.enqueue on each producer connection, Tenure workers) against the raw-SQL
equivalent (a plain INSERT per transaction, the raw loop at the ceiling's claim size), and against
PgQueuer on the same load (its own enqueue, one job per call, and its workers at its best batch)
when it is installed.

Every contender runs `repeats` times, interleaved; the median stands. Producers are processes of
their own (as many as the worker processes, `connections` connections each), so the producers'
CPU is spent beside the workers' and the server's on the same cores, as it would be in
production on a machine this size."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tenure.db.connect import connect
from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.drain import PEER_WATCH, TENURE_WATCH, BackendCpu, Watch
from tenure.lab.bench.gate import StartGate
from tenure.lab.bench.procs import ProcessGroup
from tenure.lab.bench.producer import REPORT_DIR_ENV
from tenure.lab.bench.sections import drain_timeout, peer_reset, reset

POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Load:
    """One contender's side: its database, how its queue is watched and emptied, and its worker
    and producer processes (new groups for every run)."""

    dsn: str
    watch: Watch
    reset: Callable[[str], Awaitable[None]]
    workers: Callable[[], ProcessGroup]
    producers: Callable[[], ProcessGroup]


@dataclass(frozen=True)
class PeerLoad:
    """PgQueuer's side of the section: its database and the batch its workers dequeue."""

    dsn: str
    batch: int


async def _run(load: Load, jobs: int) -> dict[str, Any]:
    await load.reset(load.dsn)
    workers, producers = load.workers(), load.producers()
    worker_backends = BackendCpu(workers)
    async with await connect(load.dsn) as conn, contextlib.AsyncExitStack() as stack:
        reports = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tenure-bench-producers-")))
        producers.env[REPORT_DIR_ENV] = str(reports)
        stack.push_async_callback(workers.stop)
        stack.push_async_callback(producers.stop)
        gate = await stack.enter_async_context(StartGate(load.dsn, load.watch.gate))
        workers.start()
        producers.start()
        startup = await gate.wait_ready(conn, [workers, producers])
        await worker_backends.start(conn)
        cpu_before = workers.cpu_seconds()
        started = await gate.open()
        enqueued_at: float | None = None
        deadline = started + drain_timeout(jobs, slow=True)
        while True:
            now = time.monotonic()
            if enqueued_at is None and len(producers.exited()) == producers.count:
                await producers.wait(0)  # raises if one failed
                enqueued_at = now
            if enqueued_at is not None and not (await load.watch.probe(conn))[1]:
                break
            if now > deadline:
                raise TimeoutError(f"end to end: not done after {now - started:.0f}s")
            await worker_backends.sample(conn)
            await asyncio.sleep(POLL_SECONDS)
        seconds = now - started
        worker_server_cpu = await worker_backends.used(conn)
        await workers.stop()
        done = await load.watch.count_succeeded(conn)
        await producers.stop()  # every report written before the folder goes
        producer_cpu, producer_server_cpu = _producer_cpu(reports)
    worker_cpu = sum(workers.cpu_seconds_at_stop) - sum(cpu_before)
    per_job = 1e6 / max(done, 1)
    return {
        "jobs": done,
        "seconds": round(seconds, 3),
        "jobs_per_second": round(done / seconds, 3),
        "enqueue_seconds": round(enqueued_at - started, 3),
        "enqueue_jobs_per_second": round(done / (enqueued_at - started), 3),
        "startup_seconds": round(max(startup.values()), 3),
        "worker_cpu_us_per_job": round(worker_cpu * per_job, 3),
        # Where the machine's CPU went per job (None: the server is not on this machine).
        "worker_server_cpu_us_per_job": _scaled(worker_server_cpu, per_job),
        "producer_cpu_us_per_job": _scaled(producer_cpu, per_job),
        "producer_server_cpu_us_per_job": _scaled(producer_server_cpu, per_job),
    }


def _producer_cpu(reports: Path) -> tuple[float | None, float | None]:
    """CPU seconds the producers and their backends spent sending, from each one's report."""
    found = [json.loads(p.read_text(encoding="ascii")) for p in sorted(reports.glob("*.json"))]
    if not found:
        return None, None
    servers = [r["server_cpu_seconds"] for r in found]
    return sum(r["cpu_seconds"] for r in found), None if None in servers else sum(servers)


def _scaled(seconds: float | None, per_job: float) -> float | None:
    return None if seconds is None else round(seconds * per_job, 3)


async def end_to_end(
    dsn: str,
    contenders: Contenders,
    jobs: int,
    processes: int,
    connections: int,
    raw_batch: int,
    repeats: int,
    pgqueuer: PeerLoad | None = None,
) -> dict[str, Any]:
    jobs -= jobs % processes  # every producer process sends the same number

    def producers(kind: str, on: str) -> Callable[[], ProcessGroup]:
        return partial(contenders.producers, kind, on, processes, jobs, connections)

    on_tenure = partial(Load, dsn, TENURE_WATCH, reset)  # Tenure and the raw loop share the schema
    loads = {
        "tenure": on_tenure(partial(contenders.tenure, dsn, processes), producers("tenure", dsn)),
        "raw": on_tenure(partial(contenders.raw, dsn, processes, raw_batch), producers("raw", dsn)),
    }
    if pgqueuer is not None:
        peer = pgqueuer.dsn
        loads["pgqueuer"] = Load(
            peer,
            PEER_WATCH["pgqueuer"],
            partial(peer_reset, "pgqueuer"),
            partial(contenders.peer, "pgqueuer", peer, processes, batch=pgqueuer.batch),
            producers("pgqueuer", peer),
        )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loads}
    for _ in range(repeats):
        for name, load in loads.items():
            runs[name].append(await _run(load, jobs))
    return {
        "jobs": jobs,
        "processes": processes,
        "producer_processes": processes,
        "connections_per_producer": connections,
        "raw_claim_batch": raw_batch,
        **({"pgqueuer_batch": pgqueuer.batch} if pgqueuer is not None else {}),
        "repeats": repeats,
        **{name: _median(results) for name, results in runs.items()},
    }


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ranked = sorted(runs, key=lambda r: r["jobs_per_second"])
    return ranked[len(ranked) // 2] | {"all_jobs_per_second": [round(r["jobs_per_second"]) for r in runs]}

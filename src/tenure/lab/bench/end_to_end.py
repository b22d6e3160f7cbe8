"""End to end: producers enqueue one job per transaction while the workers drain, all started
behind one gate; the rate is the jobs enqueued, from the gate's opening to the last of them
finished. Tenure (Client.enqueue on each producer connection, Tenure workers) against the raw-SQL
equivalent (a plain INSERT per transaction, the raw loop at the ceiling's claim size).

Both run `repeats` times, interleaved; the median stands. Producers are processes of their own
(as many as the worker processes, `connections` connections each), so the producers' CPU is
spent beside the workers' and the server's on the same cores, as it would be in production on
a machine this size."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tenure.db.connect import connect
from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.drain import TENURE_WATCH, BackendCpu
from tenure.lab.bench.gate import StartGate
from tenure.lab.bench.procs import ProcessGroup
from tenure.lab.bench.producer import REPORT_DIR_ENV
from tenure.lab.bench.queries import fetch
from tenure.lab.bench.sections import SCHEMA, drain_timeout, reset

POLL_SECONDS = 0.02


async def _run(dsn: str, workers: ProcessGroup, producers: ProcessGroup, jobs: int) -> dict[str, Any]:
    await reset(dsn)
    worker_backends = BackendCpu(workers)
    async with await connect(dsn) as conn, contextlib.AsyncExitStack() as stack:
        reports = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tenure-bench-producers-")))
        producers.env[REPORT_DIR_ENV] = str(reports)
        stack.push_async_callback(workers.stop)
        stack.push_async_callback(producers.stop)
        gate = await stack.enter_async_context(StartGate(dsn, TENURE_WATCH.gate))
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
            if enqueued_at is not None and not (await TENURE_WATCH.probe(conn))[1]:
                break
            if now > deadline:
                raise TimeoutError(f"end to end: not done after {now - started:.0f}s")
            await asyncio.sleep(POLL_SECONDS)
        seconds = now - started
        worker_server_cpu = await worker_backends.used(conn)
        await workers.stop()
        done = int((await fetch(conn, SCHEMA, "bench_succeeded"))[0]["n"])
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
) -> dict[str, Any]:
    jobs -= jobs % processes  # every producer process sends the same number
    runs: dict[str, list[dict[str, Any]]] = {"tenure": [], "raw": []}
    for _ in range(repeats):
        runs["tenure"].append(
            await _run(
                dsn,
                contenders.tenure(dsn, processes),
                contenders.producers("tenure", dsn, processes, jobs, connections),
                jobs,
            )
        )
        runs["raw"].append(
            await _run(
                dsn,
                contenders.raw(dsn, processes, raw_batch),
                contenders.producers("raw", dsn, processes, jobs, connections),
                jobs,
            )
        )
    return {
        "jobs": jobs,
        "processes": processes,
        "producer_processes": processes,
        "connections_per_producer": connections,
        "raw_claim_batch": raw_batch,
        "repeats": repeats,
        "tenure": _median(runs["tenure"]),
        "raw": _median(runs["raw"]),
    }


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ranked = sorted(runs, key=lambda r: r["jobs_per_second"])
    return ranked[len(ranked) // 2] | {"all_jobs_per_second": [round(r["jobs_per_second"]) for r in runs]}

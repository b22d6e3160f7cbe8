"""Jobs that wait for a signal (docs/waits.md): what a wait costs the job that waits, from its
signal's commit to its handler resumed past the wait, against the machine's latency floor measured
in the same section; and what many waiting jobs cost every other job: the claim, and the promotion
pass's deadline statement when no deadline is due."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from tenure import Client, JobSpec, WorkerOptions
from tenure.db.connect import connect
from tenure.db.wait_queries import WaitQueries
from tenure.lab.bench import floor, probe
from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.queries import execute, fetch
from tenure.lab.bench.sections import claim_time_ms, load, reset, wait_for_probes
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE

#: Waiting jobs written by one statement: a chunk's transaction stays seconds long.
LOAD_CHUNK = 100_000
#: How long the signal probes may take to have all gone to wait once the worker is started.
WAITING_TIMEOUT = 60.0
#: The tables the deadline pass reads, whose scans are counted.
DEADLINE_PASS_TABLES = ("jobs", "job_waits")


async def waits(
    dsn: str,
    contenders: Contenders,
    *,
    signal_probes: int,
    waiting: int,
    floor_probes: int,
    claim_samples: int,
    out_dir: Path,
) -> dict[str, Any]:
    """The machine's latency floor, then `signal_probes` jobs each resumed by a signal, then the
    claim and the deadline pass without and with `waiting` jobs waiting for signals."""
    await reset(dsn)
    floor_figures = await floor.latency_floor(dsn, floor_probes)
    await reset(dsn)
    resumed, started = await signal_to_resumed(dsn, contenders, signal_probes, out_dir)
    return {
        "floor": floor_figures,
        "signal_to_resumed": resumed | {"jobs": signal_probes},
        "signal_to_handler_start": started,
        **await waiting_cost(dsn, contenders.claim_batch, waiting, claim_samples),
    }


async def signal_to_resumed(
    dsn: str, contenders: Contenders, jobs: int, out_dir: Path
) -> tuple[dict[str, float | int | None], dict[str, float | int | None]]:
    """`jobs` jobs (and one more that warms up) each wait for a signal to a key of their own in one
    idle worker process. Then, one at a time at the latency section's random gaps, each is sent its
    signal with the sender's clock in the payload, read just before `Client.signal` (whose commit
    delivers it); the resumed handler writes `now - sent` first thing past its wait. The path:
    the signal's durable commit, which makes the job pending and notifies its queue; the worker's
    claim, woken by the notification; the handler run from the top; its wait, which returns the
    signal. Returns the percentiles of that, and of the time to the handler's start (the same path
    without the wait's statement)."""
    probe_file, started_file = (
        out_dir / "probe-tenure-signalled.txt",
        out_dir / "probe-tenure-resumed-start.txt",
    )
    for path in (probe_file, started_file):
        await asyncio.to_thread(path.unlink, missing_ok=True)
    keys = [f"bench-signal:{i}" for i in range(jobs + 1)]
    group = contenders.tenure(dsn, 1)
    group.env[probe.PROBE_FILE_ENV] = str(probe_file)
    group.env[probe.STARTED_FILE_ENV] = str(started_file)
    async with Client(dsn, schema=SCHEMA) as client:
        await client.enqueue_many(
            [JobSpec(task="signal_probe", payload={"key": key}, queue=QUEUE) for key in keys]
        )
        group.start()
        try:
            await _until_waiting(dsn, len(keys))
            warm_up, *timed = keys
            await client.signal(warm_up, {"sent": time.time()})
            await wait_for_probes(probe_file, 1)
            for path in (probe_file, started_file):
                await asyncio.to_thread(path.unlink)
            for key in timed:
                await client.signal(key, {"sent": time.time()})
                await asyncio.sleep(probe.gap_seconds())
            await wait_for_probes(probe_file, jobs)
        finally:
            await group.stop()
    return probe.percentiles_ms(probe.read(probe_file)), probe.percentiles_ms(probe.read(started_file))


async def _until_waiting(dsn: str, count: int) -> None:
    """Until `count` jobs wait: the worker ran each once, up to its wait."""
    deadline = time.monotonic() + WAITING_TIMEOUT
    async with await connect(dsn) as conn:
        while (now_waiting := (await fetch(conn, SCHEMA, "bench_waits_waiting"))[0]["n"]) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {now_waiting} of {count} signal probes went to wait")
            await asyncio.sleep(0.05)


async def waiting_cost(dsn: str, claim_batch: int, waiting: int, samples: int) -> dict[str, Any]:
    """Claim time on a queue of due jobs, and the deadline pass's time, first alone, then with
    `waiting` more jobs of the same queue waiting for signals with deadlines a day away (none due);
    then what that pass read, table by table, with them."""
    await _clear(dsn)
    pending = claim_batch * 5
    await load(dsn, pending)
    await _vacuum(dsn)
    claim_alone = await claim_time_ms(dsn, claim_batch, samples)
    pass_alone = await deadline_pass_ms(dsn, samples)
    load_seconds = await load_waiting(dsn, waiting)
    await _vacuum(dsn)
    claim_with = await claim_time_ms(dsn, claim_batch, samples)
    pass_with = await deadline_pass_ms(dsn, samples)
    reads = await deadline_pass_reads(dsn)
    await _clear(dsn)
    return {
        "pending": pending,
        "waiting": waiting,
        "waiting_load_jobs_per_second": round(waiting / load_seconds) if load_seconds else None,
        "claim_ms_pending_only": claim_alone,
        "claim_ms_with_waiting": claim_with,
        "deadline_pass_ms_none_waiting": pass_alone,
        "deadline_pass_ms_with_waiting": pass_with,
        "deadline_pass_reads": reads,
        "deadline_pass_seq_scans": sum(t["seq_scans"] for t in reads.values()),
        "deadline_pass_rows_read": sum(t["rows_read"] for t in reads.values()),
    }


async def load_waiting(dsn: str, count: int) -> float:
    """Writes `count` waiting jobs with their waits (bench_waits_load); returns the seconds it took."""
    async with await connect(dsn) as conn:
        started = time.perf_counter()
        for start in range(0, count, LOAD_CHUNK):
            await execute(conn, SCHEMA, "bench_waits_load", queue=QUEUE, count=min(LOAD_CHUNK, count - start))
        return time.perf_counter() - started


async def deadline_pass_ms(dsn: str, samples: int) -> float:
    """Median time of the promotion pass's deadline statement (waits_expire_due, a worker's batch)
    when no deadline is due, each in a transaction rolled back, as the claim is timed."""
    queries, batch = WaitQueries(SCHEMA), WorkerOptions().promotion_batch
    timings = []
    async with await connect(dsn) as conn:
        for i in range(samples + 2):
            async with conn.transaction(force_rollback=True):
                started = time.perf_counter()
                expired = await queries.expire_due(conn, limit=batch)
                if i >= 2:  # the first two warm the plan cache
                    timings.append(time.perf_counter() - started)
            if expired.timed_out:
                raise RuntimeError(
                    f"{expired.timed_out} waits timed out: the section times a pass with none due"
                )
    return round(statistics.median(timings) * 1000, 3)


async def deadline_pass_reads(dsn: str) -> dict[str, dict[str, int]]:
    """What one deadline pass read of each table, from this transaction's own counters: sequential
    scans and the rows they read (a scan's cost grows with the table), index scans and the rows
    they fetched from the table."""
    queries, batch = WaitQueries(SCHEMA), WorkerOptions().promotion_batch
    async with await connect(dsn) as conn, conn.transaction(force_rollback=True):
        before = {r["name"]: r for r in await fetch(conn, SCHEMA, "bench_waits_scans")}
        await queries.expire_due(conn, limit=batch)
        after = {r["name"]: r for r in await fetch(conn, SCHEMA, "bench_waits_scans")}

    def read(table: str, column: str) -> int:
        return int(after[table][column]) - int(before[table][column])

    return {
        table: {
            "seq_scans": read(table, "seq_scan"),
            "index_scans": read(table, "idx_scan"),
            "rows_read": read(table, "seq_tup_read") + read(table, "idx_tup_fetch"),
        }
        for table in DEADLINE_PASS_TABLES
    }


async def _clear(dsn: str) -> None:
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_waits_clear")
        await execute(conn, SCHEMA, "bench_waits_vacuum")


async def _vacuum(dsn: str) -> None:
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_waits_vacuum")

"""The measurements. Each returns plain dicts that go into the JSON result as they are."""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from psycopg import IsolationLevel

from tenure import Client, JobSpec
from tenure.db.connect import connect
from tenure.db.sqlfiles import named_queries
from tenure.lab.bench import peers, probe
from tenure.lab.bench.contenders import Contenders as Contenders
from tenure.lab.bench.drain import PEER_WATCH, TENURE_WATCH, DrainResult, drain
from tenure.lab.bench.floor import FloorProber
from tenure.lab.bench.procs import ProcessGroup
from tenure.lab.bench.queries import execute, fetch
from tenure.lab.bench.server import SCHEMA as SCHEMA
from tenure.lab.bench.statements import TenureStatements
from tenure.lab.bench.table_writes import counted
from tenure.lab.bench.tenure_worker import QUEUE
from tenure.lab.passes import worker_passes
from tenure.producer.builder import COPY_TYPES, copy_rows

NOOP = JobSpec(task="noop", queue=QUEUE, priority=0, max_attempts=20)  # complete: also COPYed raw
PROBE_TIMEOUT = 60.0


async def reset(dsn: str) -> None:
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_delete_all")
        await execute(conn, SCHEMA, "bench_vacuum")


async def load(dsn: str, count: int) -> float:
    """Bulk-enqueues `count` no-op jobs through Tenure's COPY path; returns the seconds it took."""
    async with Client(dsn, schema=SCHEMA) as client:
        started = time.perf_counter()
        await client.enqueue_copy([NOOP] * count)
        return time.perf_counter() - started


async def copy_enqueue(dsn: str, count: int) -> dict[str, Any]:
    """Client.enqueue_copy against a bare COPY of the same rows on one connection (the baseline)."""
    await reset(dsn)
    tenure_seconds = await load(dsn, count)
    await reset(dsn)
    sql = named_queries(SCHEMA)
    async with await connect(dsn) as conn:
        now = (await (await conn.execute(sql["clock_now"].encode())).fetchone() or [None])[0]
        rows = list(copy_rows([NOOP] * count, now))
        started = time.perf_counter()
        async with conn.transaction(), conn.cursor() as cur, cur.copy(sql["job_copy_in"].encode()) as copy:
            copy.set_types(COPY_TYPES)
            for row in rows:
                await copy.write_row(row)
        raw_seconds = time.perf_counter() - started
    await reset(dsn)
    return {
        "jobs": count,
        "tenure_jobs_per_second": round(count / tenure_seconds),
        "raw_copy_jobs_per_second": round(count / raw_seconds),
    }


async def tenure_drain(dsn: str, contenders: Contenders, jobs: int, processes: int) -> DrainResult:
    await reset(dsn)
    await load(dsn, jobs)
    group = contenders.tenure(dsn, processes)
    return await counted(dsn, TENURE_WATCH.table, partial(drain, dsn, group, timeout=drain_timeout(jobs)))


async def raw_drain(
    dsn: str, contenders: Contenders, jobs: int, processes: int, batch: int | None = None
) -> DrainResult:
    await reset(dsn)
    await load(dsn, jobs)
    group = contenders.raw(dsn, processes, batch)
    return await counted(dsn, TENURE_WATCH.table, partial(drain, dsn, group, timeout=drain_timeout(jobs)))


async def peer_reset(name: str, dsn: str) -> None:
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, f"peer_{name}_reset")


async def peer_drain(
    name: str,
    dsn: str,
    contenders: Contenders,
    jobs: int,
    processes: int,
    *,
    batch: int | None = None,
    concurrency: int | None = None,
) -> DrainResult:
    await peer_reset(name, dsn)
    await peers.ENQUEUE[name](dsn, jobs)
    group = contenders.peer(name, dsn, processes, batch=batch, concurrency=concurrency)
    return await drain(dsn, group, PEER_WATCH[name], timeout=drain_timeout(jobs, slow=True))


def drain_timeout(jobs: int, *, slow: bool = False) -> float:
    return 60 + jobs / (50 if slow else 500)


Sender = Callable[[float], Awaitable[None]]


async def latency(
    group: ProcessGroup,
    probe_file: Path,
    send: Sender,
    probes: int,
    background: Callable[[], Coroutine[Any, Any, None]] | None = None,
    floor: FloorProber | None = None,
) -> dict[str, Any]:
    """Probes sent one at a time at random gaps; each measures enqueue call to handler start.
    With `floor`, one of the floor's probes goes beside each, the two in a random order, and the
    floor's figures come back under "floor" (floor.py says why)."""
    await asyncio.to_thread(probe_file.unlink, missing_ok=True)
    group.env[probe.PROBE_FILE_ENV] = str(probe_file)
    group.start()
    load_task: asyncio.Task[None] | None = None
    floor_samples: list[float] = []
    try:
        await send(time.time())  # warm-up: the workers are up and listening once it ran
        await wait_for_probes(probe_file, 1)
        await asyncio.to_thread(probe_file.unlink)
        if background is not None:
            load_task = asyncio.create_task(background())
            await asyncio.sleep(1.0)
        steps: list[Callable[[], Awaitable[None]]] = [partial(_contender_probe, send)]
        if floor is not None:
            steps.append(partial(_floor_probe, floor, floor_samples))
        for _ in range(probes):
            for step in random.sample(steps, len(steps)):  # each pair in a random order
                await step()
                await asyncio.sleep(probe.gap_seconds())
        await wait_for_probes(probe_file, probes)
    finally:
        if load_task is not None:
            load_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await load_task
        await group.stop()
    figures: dict[str, Any] = dict(probe.percentiles_ms(probe.read(probe_file)))
    if floor is not None:
        figures["floor"] = probe.percentiles_ms(floor_samples)
    return figures


async def _contender_probe(send: Sender) -> None:
    await send(time.time())  # the producer's clock, read as the probe goes out


async def _floor_probe(floor: FloorProber, samples: list[float]) -> None:
    samples.append(await floor.probe())


async def wait_for_probes(path: Path, count: int) -> None:
    """Until `count` probes are in the file (PROBE_TIMEOUT at most)."""
    deadline = time.monotonic() + PROBE_TIMEOUT
    while len(probe.read(path)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(probe.read(path))} of {count} latency probes ran")
        await asyncio.sleep(0.01)


def tenure_sender(client: Client) -> Sender:
    async def send(sent: float) -> None:
        await client.enqueue_many([JobSpec(task="probe", payload={"sent": sent}, queue=QUEUE)])

    return send


def tenure_producer(client: Client, jobs_per_second: float) -> Callable[[], Coroutine[Any, Any, None]]:
    """Background load: no-op jobs enqueued every 20 ms at a steady rate."""

    async def produce() -> None:
        tick, owed = 0.02, 0.0
        while True:
            started = time.monotonic()
            owed += jobs_per_second * tick
            batch = int(owed)
            owed -= batch
            if batch:
                await client.enqueue_many([NOOP] * batch)
            await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))

    return produce


async def claim_time_ms(dsn: str, claim_batch: int, samples: int, *, oldest: int = 0) -> float:
    """Median time of Tenure's claim statement, each inside a transaction rolled back; `oldest` of
    the batch from the queue's oldest due jobs (the worker's share does so in one claim in ten)."""
    statements = TenureStatements()
    timings = []
    async with await connect(dsn) as conn:
        for i in range(samples + 2):
            async with conn.transaction(force_rollback=True):
                started = time.perf_counter()
                await statements.claim(conn, QUEUE, claim_batch, owner="bench:claim-timer", oldest=oldest)
                if i >= 2:  # the first two warm the plan cache
                    timings.append(time.perf_counter() - started)
    return round(statistics.median(timings) * 1000, 3)


async def backlog(
    dsn: str, contenders: Contenders, pending: int, processes: int, window: float | None, samples: int
) -> dict[str, Any]:
    """Claim time on a backlog of `pending`, then the drain rate over `window` seconds (None: until
    the whole backlog is done, which is also how flat worker memory stays over it)."""
    await reset(dsn)
    await load(dsn, pending)
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_vacuum")
    claim_ms = await claim_time_ms(dsn, contenders.claim_batch, samples)
    result = await drain(
        dsn,
        contenders.tenure(dsn, processes),
        timeout=(window or drain_timeout(pending)) + 120,
        window=window,
    )
    return {"pending": pending, "claim_ms": claim_ms, "drained_all": window is None, **result.as_dict()}


async def backlog_with_snapshot(
    dsn: str, contenders: Contenders, pending: int, processes: int, window: float, samples: int
) -> dict[str, Any]:
    """The same drain while another session holds a REPEATABLE READ snapshot open throughout:
    no row version it might see can be cleaned up, so dead versions pile up under the claim."""
    await reset(dsn)
    await load(dsn, pending)
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_vacuum")
    holder = await connect(dsn, autocommit=False)
    try:
        await holder.set_isolation_level(IsolationLevel.REPEATABLE_READ)
        await fetch(holder, SCHEMA, "bench_hold_snapshot")
        result = await drain(
            dsn,
            contenders.tenure(dsn, processes),
            timeout=window + 120,
            window=window,
        )
        claim_ms = await claim_time_ms(dsn, contenders.claim_batch, samples)
    finally:
        await holder.rollback()
        await holder.close()
    return {
        "pending": pending,
        "snapshot_held_seconds": round(result.seconds, 1),
        "claim_ms_after": claim_ms,
        **result.as_dict(),
    }


async def recovery(dsn: str, jobs: int) -> dict[str, Any]:
    """Recovery.run_once (the worker's own code path) on `jobs` expired leases, against one plain
    UPDATE of the same rows with no audit trail (the baseline)."""
    await reset(dsn)
    await load(dsn, jobs)
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_lease_all_expired")
        await execute(conn, SCHEMA, "bench_vacuum")
    async with worker_passes(dsn, SCHEMA, name="bench-recovery") as passes:
        started = time.perf_counter()
        recovered = await passes.recovery.run_once()
        tenure_seconds = time.perf_counter() - started
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_lease_all_expired")
        await execute(conn, SCHEMA, "bench_vacuum")
        started = time.perf_counter()
        raw_rows = await execute(conn, SCHEMA, "bench_raw_recover_all")
        raw_seconds = time.perf_counter() - started
    await reset(dsn)
    return {
        "expired_leases": jobs,
        "recovered": len(recovered),
        "tenure_seconds": round(tenure_seconds, 6),
        "raw_update_rows": raw_rows,
        "raw_update_seconds": round(raw_seconds, 6),  # a small smoke batch can take < 1 ms
    }

"""The machine's own floor under enqueue-to-start latency, measured in the same run: the least any
durable queue on this server must do between a producer's call and a handler's start.

One probe is one sequence, timed from its start to its end on one clock: a bare INSERT of one
row, committed durably on its own; a notification naming the row, sent once that commit
returned and received by a session already LISTENing (the notifying session commits without
waiting for a WAL flush, as Tenure's own wake-ups do: a notification carries nothing to keep);
then, on the listening session, a claim of that row (an UPDATE ... RETURNING of the lease
columns), committed durably. Probes are sent one at a time at the latency section's random
gaps, after one that warms the sessions up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.lab.bench import probe
from tenure.lab.bench.queries import execute, fetch
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.tenure_worker import QUEUE

OWNER = "bench:floor"
PROBE_TIMEOUT = 10.0


async def _heard(listener: AsyncConnection[Any]) -> int:
    """The job id of the next notification (the generator is run to its end: until then it holds
    the connection, which the claim needs next)."""
    heard = [int(n.payload) async for n in listener.notifies(timeout=PROBE_TIMEOUT, stop_after=1)]
    if not heard:
        raise TimeoutError(f"the latency floor's notification did not arrive in {PROBE_TIMEOUT:.0f}s")
    return heard[0]


async def _probe(
    producer: AsyncConnection[Any], notifier: AsyncConnection[Any], listener: AsyncConnection[Any]
) -> float:
    """Seconds from the INSERT's start to the claim's commit."""
    heard = asyncio.create_task(_heard(listener))
    await asyncio.sleep(0)  # the listener waits before the job exists, as an idle worker does
    started = time.perf_counter()
    job = (await fetch(producer, SCHEMA, "bench_floor_insert", queue=QUEUE))[0]["id"]
    await fetch(notifier, SCHEMA, "bench_floor_notify", id=job)
    claimed = await fetch(listener, SCHEMA, "bench_floor_claim", id=await heard, owner=OWNER)
    elapsed = time.perf_counter() - started
    if [row["id"] for row in claimed] != [job]:
        raise RuntimeError(f"the latency floor's claim took {claimed}, not job {job}")
    return elapsed


async def latency_floor(dsn: str, probes: int) -> dict[str, Any]:
    """p50 and p99 of `probes` sequences (probe.percentiles_ms)."""
    async with (
        await connect(dsn, name="tenure-bench-floor") as producer,
        await connect(dsn, name="tenure-bench-floor") as notifier,
        await connect(dsn, name="tenure-bench-floor") as listener,
    ):
        await execute(notifier, SCHEMA, "bench_floor_async_commit")
        await execute(listener, SCHEMA, "bench_floor_listen")
        await _probe(producer, notifier, listener)  # warm-up
        samples = []
        for _ in range(probes):
            await asyncio.sleep(probe.gap_seconds())
            samples.append(await _probe(producer, notifier, listener))
    return probe.percentiles_ms(samples)

"""The machine's own floor under enqueue-to-start latency, measured in the same run: the least any
durable queue on this server must do between a producer's call and a handler's start.

One probe is one sequence, timed from its start to its end on one clock: a bare INSERT of one
row, committed durably on its own; a notification naming the row, sent once that commit
returned and received by a session already LISTENing (the notifying session commits without
waiting for a WAL flush, as Tenure's own wake-ups do: a notification carries nothing to keep);
then, on the listening session, a claim of that row (an UPDATE ... RETURNING of the lease
columns), committed durably.

The latency section sends the floor's probes between a contender's own, each pair in a random
order (FloorProber): a machine whose speed drifts over a run (a virtual machine's neighbours, its
CPU's clock) then slows both alike, where a floor measured first and a contender after differed by
the drift (the same code gave 1.13x to 1.48x of a floor measured apart). The floor's rows go to a
queue of their own, which no contender's worker claims."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.lab.bench import probe
from tenure.lab.bench.queries import execute, fetch
from tenure.lab.bench.server import SCHEMA

OWNER = "bench:floor"
#: The floor's own queue: a contender's worker running beside it claims none of its rows.
QUEUE = "bench-floor"
PROBE_TIMEOUT = 10.0


class FloorProber:
    """The floor's three sessions (producer, notifier, listener), opened and warmed up by one
    probe; `probe()` sends one more and returns its seconds."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._stack = AsyncExitStack()
        self._producer: AsyncConnection[Any] | None = None
        self._notifier: AsyncConnection[Any] | None = None
        self._listener: AsyncConnection[Any] | None = None

    async def __aenter__(self) -> FloorProber:
        opened = [
            await self._stack.enter_async_context(await connect(self.dsn, name="tenure-bench-floor"))
            for _ in range(3)
        ]
        self._producer, self._notifier, self._listener = opened
        await execute(self._notifier, SCHEMA, "bench_floor_async_commit")
        await execute(self._listener, SCHEMA, "bench_floor_listen")
        await self.probe()  # warm-up
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def probe(self) -> float:
        """Seconds from the INSERT's start to the claim's commit."""
        producer, notifier, listener = self._producer, self._notifier, self._listener
        assert producer is not None and notifier is not None and listener is not None
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


async def _heard(listener: AsyncConnection[Any]) -> int:
    """The job id of the next notification (the generator is run to its end: until then it holds
    the connection, which the claim needs next)."""
    heard = [int(n.payload) async for n in listener.notifies(timeout=PROBE_TIMEOUT, stop_after=1)]
    if not heard:
        raise TimeoutError(f"the latency floor's notification did not arrive in {PROBE_TIMEOUT:.0f}s")
    return heard[0]


async def latency_floor(dsn: str, probes: int) -> dict[str, Any]:
    """p50 and p99 of `probes` sequences sent on their own, at the latency section's random gaps
    (probe.percentiles_ms)."""
    async with FloorProber(dsn) as floor:
        samples = []
        for _ in range(probes):
            await asyncio.sleep(probe.gap_seconds())
            samples.append(await floor.probe())
    return probe.percentiles_ms(samples)

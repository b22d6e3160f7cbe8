"""What unique jobs and idempotent enqueue cost a producer: single enqueues, one at a time
on one client, plain against unique (each key new), unique meeting a held key (the lookup
path), and with the caller's own idempotency key."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tenure import Client, JobSpec, Unique
from tenure.lab.bench.sections import SCHEMA, reset

QUEUE = "bench.enqueue"


async def _rate(client: Client, specs: list[JobSpec]) -> float:
    started = time.perf_counter()
    for spec in specs:
        await client.enqueue_many([spec])
    return len(specs) / (time.perf_counter() - started)


async def unique_cost(dsn: str, count: int) -> dict[str, Any]:
    """Enqueues per second of each kind, `count` of each, interleaved in rounds so that a drift
    of the machine's speed falls on all of them alike."""
    await reset(dsn)
    rounds = 4
    per = max(1, count // rounds)
    rates: dict[str, list[float]] = {"plain": [], "unique_new": [], "unique_held": [], "idempotency_key": []}
    async with Client(dsn, schema=SCHEMA) as client:
        held = JobSpec(task="bench.noop", queue=QUEUE, unique=Unique(key="held"))
        await client.enqueue_many([held])
        for r in range(rounds):
            kinds = {
                "plain": [JobSpec(task="bench.noop", queue=QUEUE) for _ in range(per)],
                "unique_new": [
                    JobSpec(task="bench.noop", queue=QUEUE, unique=Unique(key=f"k{r}-{i}"))
                    for i in range(per)
                ],
                "unique_held": [held] * per,
                "idempotency_key": [
                    JobSpec(task="bench.noop", queue=QUEUE, idempotency_key=uuid.uuid4()) for _ in range(per)
                ],
            }
            for name, specs in kinds.items():
                rates[name].append(await _rate(client, specs))
    median = {name: sorted(values)[len(values) // 2] for name, values in rates.items()}
    return {"enqueues_per_kind": per * rounds, **{f"{k}_per_second": round(v, 1) for k, v in median.items()}}

"""What global limits cost the claim: jobs claimed and completed per second, batch after
batch on one connection, from an unlimited queue against a limited one whose limit never binds,
and against a per-key limit over 1,000 keys."""

from __future__ import annotations

import time
from typing import Any

from tenure import Client, JobSpec
from tenure.db.connect import connect
from tenure.lab.bench.queries import execute
from tenure.lab.bench.sections import SCHEMA, reset
from tenure.lab.bench.statements import TenureStatements

KEYS = 1000


async def _drain(dsn: str, queue: str, jobs: int, batch: int, *, limited: bool) -> float:
    """Claims and completes `jobs` jobs of `queue`; returns jobs per second."""
    statements = TenureStatements()
    done = 0
    async with await connect(dsn) as conn:
        started = time.perf_counter()
        while done < jobs:
            claimed = await statements.claim(conn, queue, batch, limited=limited)
            if not claimed:
                break
            await statements.complete(conn, claimed)
            done += len(claimed)
        seconds = time.perf_counter() - started
    return done / seconds


async def limit_cost(dsn: str, jobs: int, batch: int) -> dict[str, Any]:
    """Claim-and-complete rate of each variant, interleaved over 3 rounds (median reported)."""
    rates: dict[str, list[float]] = {"unlimited": [], "limit_not_binding": [], "per_key_1000": []}
    for _ in range(3):
        for variant in rates:
            await reset(dsn)
            async with await connect(dsn) as conn:
                await execute(conn, SCHEMA, "bench_limits_clear")
                if variant == "limit_not_binding":
                    await execute(conn, SCHEMA, "bench_limit_queue", queue="limits", max_running=1_000_000)
                elif variant == "per_key_1000":
                    await execute(conn, SCHEMA, "bench_limit_per_key", queue="limits", key="customer")
            specs = [
                JobSpec(task="bench.noop", queue="limits", payload={"customer": i % KEYS})
                for i in range(jobs)
            ]
            async with Client(dsn, schema=SCHEMA) as client:
                await client.enqueue_copy(specs)
            rates[variant].append(await _drain(dsn, "limits", jobs, batch, limited=variant != "unlimited"))
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_limits_clear")
    median = {k: sorted(v)[1] for k, v in rates.items()}
    return {"jobs": jobs, "keys": KEYS, **{f"{k}_jobs_per_second": round(v, 1) for k, v in median.items()}}

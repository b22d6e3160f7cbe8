"""Jobs that wait: the claim's cost while many jobs are not yet due, and what a worker writes per
waiting job to keep starvation bounded, over a simulated hour."""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from typing import Any

import psycopg

from tenure import Client, JobSpec
from tenure.db.connect import connect
from tenure.lab.bench.queries import clock, execute
from tenure.lab.bench.sections import NOOP, SCHEMA, claim_time_ms, load, reset
from tenure.lab.bench.server import CostMeter
from tenure.lab.bench.statements import TenureStatements
from tenure.lab.passes import worker_passes

#: What priority aging wrote, as the review measured it: WAL bytes per waiting row per aging step
#: of 60 s. Quoted for context; that code is gone.
AGING_BYTES_PER_ROW_PER_STEP = 443
AGING_STEP_SECONDS = 60.0
HOUR = 3600.0
#: Rounds of the not-yet-due section, each timing the claim on both databases in turn.
SIDE_BY_SIDE_ROUNDS = 5
#: Not-yet-due jobs promoted to measure the promotion rate (all of them below this many).
PROMOTION_SAMPLE = 100_000


async def _vacuum(dsn: str) -> None:
    async with await connect(dsn) as conn:
        await execute(conn, SCHEMA, "bench_vacuum")


async def _settled(dsn: str) -> bool:
    """Vacuumed, then checkpointed: the claims timed next do not share the disk with the writeback
    of the rows just loaded. Whether the checkpoint ran: a role without the right to one
    (superuser or pg_checkpoint) times without it."""
    await _vacuum(dsn)
    async with await connect(dsn) as conn:
        try:
            await execute(conn, SCHEMA, "bench_checkpoint")
        except psycopg.errors.InsufficientPrivilege:
            return False
    return True


async def not_yet_due(
    dsn: str, due_only_dsn: str, claim_batch: int, future: int, samples: int
) -> dict[str, Any]:
    """Claim time with `future` jobs due in an hour, at a higher priority, in the same queue as the
    due ones (on `dsn`), against the same claim with the due jobs only (on `due_only_dsn`, a
    second database of the same server); then the rate at which they are promoted once due.

    The two claims are timed side by side, round by round, each database loaded and settled
    first: timed one after the other, before and after the load, the claim after it met the
    writeback of a million rows and whatever else the disk did meanwhile, and the ratio read
    1.09x-1.35x in runs where the two side by side differed by 1.07x (docs/performance.md,
    twenty-third round)."""
    due = claim_batch * 5
    later = JobSpec(task=NOOP.task, queue=NOOP.queue, priority=10, delay=HOUR)
    for database in (due_only_dsn, dsn):
        await reset(database)
        await load(database, due)
    async with Client(dsn, schema=SCHEMA) as client:
        for start in range(0, future, 100_000):
            await client.enqueue_copy([later] * min(100_000, future - start))
    due_only_checkpointed = await _settled(due_only_dsn)
    checkpointed = await _settled(dsn) and due_only_checkpointed
    alone: list[float] = []
    with_future: list[float] = []
    for _ in range(SIDE_BY_SIDE_ROUNDS):
        alone.append(await claim_time_ms(due_only_dsn, claim_batch, samples))
        with_future.append(await claim_time_ms(dsn, claim_batch, samples))
    await reset(due_only_dsn)
    statements = TenureStatements()
    promoted, target = 0, min(future, PROMOTION_SAMPLE)
    async with await connect(dsn) as conn:
        now = await clock(conn, SCHEMA) + timedelta(hours=2)
        started = time.perf_counter()
        while promoted < target:
            count = await statements.promote_due(conn, min(1000, target - promoted), now)
            if not count:
                break
            promoted += count
        promote_seconds = time.perf_counter() - started
    await reset(dsn)
    return {
        "due": due,
        "not_yet_due": future,
        "claim_ms_due_only": statistics.median(alone),
        "claim_ms_with_not_yet_due": statistics.median(with_future),
        "claim_ms_rounds": {"due_only": alone, "with_not_yet_due": with_future},
        "checkpointed_before_timing": checkpointed,
        "promoted": promoted,
        "promotion_jobs_per_second": round(promoted / promote_seconds) if promote_seconds else None,
    }


async def fairness_cost(
    dsn: str, claim_batch: int, waiting: int, step_seconds: float, samples: int
) -> dict[str, Any]:
    """`waiting` due jobs wait through a simulated hour (injected clock, nothing sleeps) while a
    worker's periodic passes run at their intervals: promotion and lease recovery, the passes that
    replaced priority aging's. The WAL they write, per waiting job, against aging's. Also the claim
    time of a claim that takes its oldest-first share against one by priority only."""
    await reset(dsn)
    await load(dsn, waiting)
    await _vacuum(dsn)  # hint bits and visibility set now, not counted below
    by_priority = await claim_time_ms(dsn, claim_batch, samples)
    with_share = await claim_time_ms(dsn, claim_batch, samples, oldest=1)
    steps = round(HOUR / step_seconds)
    meter = CostMeter(dsn)
    async with worker_passes(dsn, SCHEMA, name="bench-fairness") as passes:
        async with await connect(dsn) as conn:
            t0 = await clock(conn, SCHEMA)
        await meter.start()
        started = time.perf_counter()
        for step in range(1, steps + 1):
            now = t0 + timedelta(seconds=step * step_seconds)
            await passes.promoter.run_once(now=now)
            await passes.recovery.run_once(now=now)
        seconds = time.perf_counter() - started
    wal, _ = await meter.stop()
    await reset(dsn)
    aging = AGING_BYTES_PER_ROW_PER_STEP * HOUR / AGING_STEP_SECONDS
    return {
        "waiting_jobs": waiting,
        "simulated_seconds": HOUR,
        "step_seconds": step_seconds,
        "passes": 2 * steps,
        "run_seconds": round(seconds, 2),
        "wal_bytes": wal,
        "wal_bytes_per_waiting_job": round(wal / waiting, 4),
        "aging_bytes_per_waiting_job_per_hour": aging,
        "aging_source": "priority aging as reviewed: 443 B of WAL per waiting row per 60 s aging step",
        "claim_ms_by_priority_only": by_priority,
        "claim_ms_with_oldest_share": with_share,
    }

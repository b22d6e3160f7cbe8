"""Drain measurement shared by every contender: bulk-load a backlog, start the worker processes,
watch the number of unfinished jobs, and time from the first finished job to the last."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from tenure.bench.procs import ProcessGroup
from tenure.bench.queries import fetch
from tenure.bench.server import SCHEMA, CostMeter
from tenure.db.connect import connect

POLL_SECONDS = 0.02

Counter = Callable[[AsyncConnection[Any]], Awaitable[int]]


def unfinished_counter(query: str) -> Counter:
    async def count(conn: AsyncConnection[Any]) -> int:
        return int((await fetch(conn, SCHEMA, query))[0]["n"])

    return count


@dataclass
class DrainResult:
    jobs: int
    seconds: float
    jobs_per_second: float
    wal_bytes_per_job: float
    commits_per_job: float
    peak_rss_mib: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(self).items()}


async def drain_state(conn: AsyncConnection[Any]) -> tuple[bool, bool]:
    """(some job was claimed, some job is unfinished) for Tenure's schema, without counting."""
    row = (await fetch(conn, SCHEMA, "bench_drain_state"))[0]
    return bool(row["started"]), bool(row["unfinished"])


async def drain(
    dsn: str,
    group: ProcessGroup,
    count: Counter,
    *,
    timeout: float,
    window: float | None = None,
    state: Callable[[AsyncConnection[Any]], Awaitable[tuple[bool, bool]]] | None = None,
) -> DrainResult:
    """Runs `group` until no job is unfinished, or for `window` seconds after the first progress.

    The rate is taken from the first poll that saw progress to the last, so process start-up is
    not counted. With `state` (a cheap probe), large backlogs are polled without counting them:
    progress then starts at the first claim, and jobs are counted only at the end of a window.
    """
    meter = CostMeter(dsn)
    async with await connect(dsn) as conn:
        initial = await count(conn)
        own_reads = 1  # every autocommit read is a commit too
        await meter.start()
        group.start()
        try:
            first: tuple[float, int] | None = None
            deadline = time.monotonic() + timeout
            while True:
                if state is not None:
                    started, unfinished = await state(conn)
                    left = initial if unfinished else 0
                else:
                    left = await count(conn)
                    started, unfinished = left < initial, left > 0
                own_reads += 1
                now = time.monotonic()
                if first is None and started:
                    first = (now, left)
                if not unfinished:
                    break
                if window is not None and first is not None and now - first[0] >= window:
                    if state is not None:
                        left = await count(conn)
                        own_reads += 1
                    break
                if now > deadline:
                    raise TimeoutError(f"jobs still unfinished after {timeout:.0f}s")
                await asyncio.sleep(POLL_SECONDS)
        finally:
            await group.stop()
    wal, commits = await meter.stop()
    commits -= own_reads
    done = initial - left
    if first is None:
        raise RuntimeError("the workers finished no job")
    span = max(now - first[0], POLL_SECONDS)
    measured = first[1] - left
    rate = measured / span if measured > 0 else done / span
    return DrainResult(
        jobs=done,
        seconds=span,
        jobs_per_second=rate,
        wal_bytes_per_job=wal / max(done, 1),
        commits_per_job=commits / max(done, 1),
        peak_rss_mib=max(group.peak_rss_kib, default=0) / 1024,
    )

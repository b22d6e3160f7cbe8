"""Drain measurement shared by every contender: with a backlog loaded, start the worker
processes behind the start gate (gate.py), open it once every process is ready, and time from
then to the last finished job. Start-up is measured per process and reported on its own.

Besides the rate: WAL and commits per job, the CPU the workers used per job (from the kernel,
between the gate's opening and the stop), the server backends' CPU per job for the same
sessions when the server runs on this machine, and the rate of the first and second half of the
jobs (a rate that climbs through the run is warm-up; one that falls is a cost that grows with
the work done)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from tenure.bench.cpu import backend_cpu_seconds
from tenure.bench.gate import TENURE_GATE, StartGate
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
    #: The slowest process's start-up: spawn to its first claim waiting at the gate (None: no gate).
    startup_seconds: float | None = None
    worker_cpu_us_per_job: float | None = None
    server_cpu_us_per_job: float | None = None
    first_half_jobs_per_second: float | None = None
    second_half_jobs_per_second: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(self).items()}


async def drain_state(conn: AsyncConnection[Any]) -> tuple[bool, bool]:
    """(some job was claimed, some job is unfinished) for Tenure's schema, without counting."""
    row = (await fetch(conn, SCHEMA, "bench_drain_state"))[0]
    return bool(row["started"]), bool(row["unfinished"])


class BackendCpu:
    """CPU seconds of the server backends serving one process group, between two readings."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group
        self.before: dict[int, float] = {}

    async def _read(self, conn: AsyncConnection[Any]) -> dict[int, float]:
        rows = await fetch(conn, SCHEMA, "bench_group_backends", prefix=self.group.name_prefix)
        return backend_cpu_seconds([int(r["pid"]) for r in rows])

    async def start(self, conn: AsyncConnection[Any]) -> None:
        self.before = await self._read(conn)

    async def used(self, conn: AsyncConnection[Any]) -> float | None:
        after = await self._read(conn)
        if not after:
            return None  # the server is not on this machine
        # A backend opened during the drain (a pool growing) counts from zero.
        return sum(seconds - self.before.get(pid, 0.0) for pid, seconds in after.items())


def half_rates(samples: list[tuple[float, int]]) -> tuple[float | None, float | None]:
    """Rates of the first and the second half of the jobs, from (time, unfinished) samples whose
    first is the start."""
    if len(samples) < 3:
        return None, None
    (t0, initial), (t_end, left) = samples[0], samples[-1]
    total = initial - left
    half = next(((t, initial - n) for t, n in samples if initial - n >= total / 2), None)
    if half is None or total <= 1 or not t0 < half[0] < t_end:
        return None, None
    t_half, done_half = half
    return done_half / (t_half - t0), (total - done_half) / (t_end - t_half)


async def drain(
    dsn: str,
    group: ProcessGroup,
    count: Counter,
    *,
    timeout: float,
    window: float | None = None,
    state: Callable[[AsyncConnection[Any]], Awaitable[tuple[bool, bool]]] | None = None,
    gate: str | None = TENURE_GATE,
    on_open: Callable[[ProcessGroup], None] | None = None,
) -> DrainResult:
    """Runs `group` until no job is unfinished, or for `window` seconds after the start.

    With `gate` (the named query locking the contender's queue table), the start is the gate's
    opening, once every process is ready. Without it (a pooler in front of the server may not
    pass session names on), the start is the first poll that saw progress, as it used to be.
    With `state` (a cheap probe), large backlogs are polled without counting them: jobs are
    counted only at the end of a window, and the half rates are left out. `on_open` is called
    just before the gate opens (a profiler starts there).
    """
    meter = CostMeter(dsn)
    backends = BackendCpu(group)
    first: tuple[float, int] | None = None
    startup: dict[str, float] = {}
    cpu_before: list[float] = []
    server_cpu: float | None = None
    async with await connect(dsn) as conn:
        initial = await count(conn)
        own_reads = 1  # every autocommit read is a commit too
        await meter.start()
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(group.stop)  # last: the gate is released first
            start_gate = await stack.enter_async_context(StartGate(dsn, gate)) if gate else None
            group.start()
            if start_gate is not None:
                startup = await start_gate.wait_ready(conn, [group])
                await backends.start(conn)
                own_reads += start_gate.polls + 2  # and the backends' reads, before and after
                cpu_before = group.cpu_seconds()
                if on_open is not None:
                    on_open(group)
                first = (await start_gate.open(), initial)
            samples: list[tuple[float, int]] = [first] if first else []
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
                    samples.append(first)
                elif state is None and first is not None:
                    samples.append((now, left))
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
            if start_gate is not None:
                server_cpu = await backends.used(conn)
    wal, commits = await meter.stop()
    commits -= own_reads + (1 if gate else 0)  # the gate's one transaction
    done = initial - left
    if first is None:
        raise RuntimeError("the workers finished no job")
    span = max(now - first[0], POLL_SECONDS)
    measured = first[1] - left
    rate = measured / span if measured > 0 else done / span
    cpu_used = sum(group.cpu_seconds_at_stop) - sum(cpu_before) if cpu_before else None
    first_half, second_half = half_rates(samples) if state is None else (None, None)
    return DrainResult(
        jobs=done,
        seconds=span,
        jobs_per_second=rate,
        wal_bytes_per_job=wal / max(done, 1),
        commits_per_job=commits / max(done, 1),
        peak_rss_mib=max(group.peak_rss_kib, default=0) / 1024,
        startup_seconds=max(startup.values()) if startup else None,
        worker_cpu_us_per_job=cpu_used * 1e6 / max(measured, 1) if cpu_used is not None else None,
        server_cpu_us_per_job=server_cpu * 1e6 / max(measured, 1) if server_cpu is not None else None,
        first_half_jobs_per_second=first_half,
        second_half_jobs_per_second=second_half,
    )

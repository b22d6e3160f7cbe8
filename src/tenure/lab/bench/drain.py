"""Drain measurement shared by every contender: with a backlog loaded, start the worker
processes behind the start gate (gate.py), open it once every process is ready, and time from
then to the poll that sees no job unfinished. Start-up is measured per process and reported on
its own.

While a drain runs, the benchmark polls only index probes (`Watch.state`): counting the
unfinished jobs costs more the more there are (15 ms at 50k on Tenure's schema, 7 ms on
PgQueuer's), and every 20 ms that was most of a core taken from the server under test, more in
a larger run. Jobs are counted at the start and the end only.

Besides the rate: WAL and commits per job, the CPU the workers used per job (from the kernel,
between the gate's opening and the stop), the server backends' CPU per job for the same
sessions when the server runs on this machine, and the rates of the first and second half of
the jobs, from the finish times the contender stored (a rate that climbs through the run is
warm-up; one that falls is a cost that grows with the work done)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.lab.bench.cpu import backend_cpu_seconds
from tenure.lab.bench.gate import StartGate
from tenure.lab.bench.procs import ProcessGroup
from tenure.lab.bench.queries import clock, fetch
from tenure.lab.bench.server import SCHEMA, CostMeter

POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Watch:
    """How the benchmark watches one contender's queue, each by a named query of bench.sql."""

    unfinished: str  # the count of unfinished jobs: at the start and the end only
    state: str  # (started, unfinished) from index probes: polled throughout
    finished_at: str  # when the k-th job finished (from 0), for the half rates
    gate: str  # the start gate's lock on the contender's table
    succeeded: str  # the count of jobs finished successfully
    table: str  # the contender's queue table, whose row writes are counted (table_writes.py)

    async def count(self, conn: AsyncConnection[Any]) -> int:
        return int((await fetch(conn, SCHEMA, self.unfinished))[0]["n"])

    async def count_succeeded(self, conn: AsyncConnection[Any]) -> int:
        return int((await fetch(conn, SCHEMA, self.succeeded))[0]["n"])

    async def probe(self, conn: AsyncConnection[Any]) -> tuple[bool, bool]:
        row = (await fetch(conn, SCHEMA, self.state))[0]
        return bool(row["started"]), bool(row["unfinished"])

    async def finished_time(self, conn: AsyncConnection[Any], k: int) -> datetime | None:
        rows = await fetch(conn, SCHEMA, self.finished_at, k=k)
        return rows[0]["at"] if rows else None


TENURE_WATCH = Watch(
    "bench_unfinished",
    "bench_drain_state",
    "bench_finished_at",
    "bench_gate_tenure",
    "bench_succeeded",
    f"{SCHEMA}.jobs",
)
PEER_WATCH = {
    name: Watch(
        f"peer_{name}_unfinished",
        f"peer_{name}_state",
        f"peer_{name}_finished_at",
        f"peer_{name}_gate",
        f"peer_{name}_succeeded",
        table,
    )
    for name, table in (("pgqueuer", "pgqueuer"), ("procrastinate", "procrastinate_jobs"))
}


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
    #: The last process's readiness after the first's: what a drain timed from its first finished
    #: job used to count of start-up (the first process draining alone meanwhile).
    startup_spread_seconds: float | None = None
    worker_cpu_us_per_job: float | None = None
    server_cpu_us_per_job: float | None = None
    first_half_jobs_per_second: float | None = None
    second_half_jobs_per_second: float | None = None
    #: Row writes to the queue table per job (table_writes.py; None where they were not counted).
    inserts_per_job: float | None = None
    non_hot_updates_per_job: float | None = None
    hot_updates_per_job: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(self).items()}


class BackendCpu:
    """CPU seconds of the server backends serving one process group, between two readings.

    A backend that exits meanwhile (a worker replacing a connection, a pool shrinking) takes its
    CPU time with it, so the backends are read again at every `sample`, and each one counts
    what it used up to its last reading: a connection replaced between two samples loses only
    what its backend spent since the last one (at most a poll interval of one backend's work)."""

    def __init__(self, group: ProcessGroup) -> None:
        self.group = group
        self.first: dict[int, float] = {}
        self.latest: dict[int, float] = {}

    async def _read(self, conn: AsyncConnection[Any]) -> dict[int, float]:
        rows = await fetch(conn, SCHEMA, "bench_group_backends", prefix=self.group.name_prefix)
        return backend_cpu_seconds([int(r["pid"]) for r in rows])

    async def start(self, conn: AsyncConnection[Any]) -> None:
        self.first = await self._read(conn)
        self.latest = dict(self.first)

    async def sample(self, conn: AsyncConnection[Any]) -> None:
        """Reads the group's backends now; one opened since the start counts from zero."""
        for pid, seconds in (await self._read(conn)).items():
            self.first.setdefault(pid, 0.0)
            self.latest[pid] = seconds

    async def used(self, conn: AsyncConnection[Any]) -> float | None:
        await self.sample(conn)
        if not self.latest:
            return None  # the server is not on this machine
        return sum(seconds - self.first[pid] for pid, seconds in self.latest.items())


async def half_rates(
    conn: AsyncConnection[Any], watch: Watch, start: datetime | None, done: int
) -> tuple[float | None, float | None]:
    """Rates of the first and the second half of the `done` jobs, from their finish times on the
    server's clock; `start` is the gate's opening on that clock (None: the first finish)."""
    if done < 4:
        return None, None
    start = start or await watch.finished_time(conn, 0)
    middle = await watch.finished_time(conn, done // 2 - 1)
    last = await watch.finished_time(conn, done - 1)
    if start is None or middle is None or last is None or not start < middle < last:
        return None, None
    first = (done // 2) / (middle - start).total_seconds()
    return first, (done - done // 2) / (last - middle).total_seconds()


async def drain(
    dsn: str,
    group: ProcessGroup,
    watch: Watch = TENURE_WATCH,
    *,
    timeout: float,
    window: float | None = None,
    gated: bool = True,
    poll_counts: bool = False,
    on_open: Callable[[ProcessGroup], None] | None = None,
) -> DrainResult:
    """Runs `group` until no job is unfinished, or for `window` seconds after the start.

    Gated, the start is the gate's opening, once every process is ready. Not gated (a pooler in
    front of the server may not pass session names on), the start is the first poll that saw a
    job claimed. `poll_counts` counts the unfinished jobs at every poll instead of probing, as
    drains used to (benchmarks/size_effect.py shows what that cost). `on_open` is called just
    before the gate opens (a profiler starts there). After a window, the half rates are left out.
    """
    meter = CostMeter(dsn)
    backends = BackendCpu(group)
    first: tuple[float, int] | None = None
    start_on_server: datetime | None = None
    startup: dict[str, float] = {}
    cpu_before: list[float] = []
    server_cpu: float | None = None
    async with await connect(dsn) as conn:
        initial = await watch.count(conn)
        own_reads = 1  # every autocommit read is a commit too
        await meter.start()
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(group.stop)  # last: the gate is released first
            start_gate = await stack.enter_async_context(StartGate(dsn, watch.gate)) if gated else None
            group.start()
            if start_gate is not None:
                startup = await start_gate.wait_ready(conn, [group])
                await backends.start(conn)
                cpu_before = group.cpu_seconds()
                if on_open is not None:
                    on_open(group)
                first = (await start_gate.open(), initial)
                start_on_server = await clock(conn, SCHEMA)
                own_reads += start_gate.polls + 2  # the backends' first read and the clock
            deadline = time.monotonic() + timeout
            while True:
                if poll_counts:
                    left = await watch.count(conn)
                    started, unfinished = left < initial, left > 0
                else:
                    started, unfinished = await watch.probe(conn)
                    left = initial if unfinished else 0
                own_reads += 1
                now = time.monotonic()
                if first is None and started:
                    first = (now, left)
                if not unfinished:
                    break
                if window is not None and first is not None and now - first[0] >= window:
                    left = await watch.count(conn)
                    own_reads += 1
                    break
                if now > deadline:
                    raise TimeoutError(f"jobs still unfinished after {timeout:.0f}s")
                if start_gate is not None:
                    await backends.sample(conn)
                    own_reads += 1
                await asyncio.sleep(POLL_SECONDS)
            if start_gate is not None:
                server_cpu = await backends.used(conn)
                own_reads += 1
    if first is None:
        raise RuntimeError("the workers finished no job")
    wal, commits = await meter.stop()
    commits -= own_reads + (1 if gated else 0)  # the gate's one transaction
    done = initial - left
    halves: tuple[float | None, float | None] = (None, None)
    if window is None:  # read after the meter stopped: reading the rows may set their hint bits
        async with await connect(dsn) as conn:
            halves = await half_rates(conn, watch, start_on_server, done)
    span = max(now - first[0], POLL_SECONDS)
    measured = first[1] - left
    rate = measured / span if measured > 0 else done / span
    cpu_used = sum(group.cpu_seconds_at_stop) - sum(cpu_before) if cpu_before else None
    return DrainResult(
        jobs=done,
        seconds=span,
        jobs_per_second=rate,
        wal_bytes_per_job=wal / max(done, 1),
        commits_per_job=commits / max(done, 1),
        peak_rss_mib=max(group.peak_rss_kib, default=0) / 1024,
        startup_seconds=max(startup.values()) if startup else None,
        startup_spread_seconds=max(startup.values()) - min(startup.values()) if startup else None,
        worker_cpu_us_per_job=cpu_used * 1e6 / max(measured, 1) if cpu_used is not None else None,
        server_cpu_us_per_job=server_cpu * 1e6 / max(measured, 1) if server_cpu is not None else None,
        first_half_jobs_per_second=halves[0],
        second_half_jobs_per_second=halves[1],
    )

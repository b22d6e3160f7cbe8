"""The start gate: every contender's worker processes start against a locked queue table, and
the clock starts when the lock is released, once every process has its first claim waiting.

Why: a drain timed from its first finished job hides the first process's start-up and counts the
others' (the second process still imports while the first drains), so the figure depends on the
size of the run. Behind the gate no process claims a job before all of them are ready, and each
process's start-up (spawn to its first claim at the gate) is measured on its own.

The lock is EXCLUSIVE: plain reads (the benchmark's own counting) pass; claims, completions and
inserts (FOR UPDATE, UPDATE, INSERT) wait for it. Readiness is seen from the server: each process
names its sessions (procs.process_dsn), and a process is ready when a session of it is blocked
by the gate's session on a statement holding the contender's claim marker. It needs nothing of
the contenders beyond a DSN, so Tenure, the raw loop and the peers start the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.lab.bench.procs import ProcessGroup
from tenure.lab.bench.queries import execute, fetch
from tenure.lab.bench.server import SCHEMA

READY_TIMEOUT = 90.0
POLL_SECONDS = 0.01


class StartGate:
    """`async with StartGate(dsn, lock_query) as gate`: the table is locked inside the block until
    `open()`; leaving the block releases it in any case."""

    def __init__(self, dsn: str, lock_query: str) -> None:
        self.dsn = dsn
        self.lock_query = lock_query
        self.conn: AsyncConnection[Any] | None = None
        self.pid = 0
        self.polls = 0  # reads on the caller's connection, each a commit the cost meter counts
        self.opened_at: float | None = None

    async def __aenter__(self) -> StartGate:
        self.conn = await connect(self.dsn, autocommit=False, name="tenure-bench-gate")
        self.pid = int((await fetch(self.conn, SCHEMA, "bench_backend_pid"))[0]["pid"])
        await execute(self.conn, SCHEMA, self.lock_query)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            await self.conn.close()  # rolls back if still locked
            self.conn = None

    async def wait_ready(
        self, monitor: AsyncConnection[Any], groups: Sequence[ProcessGroup], timeout: float = READY_TIMEOUT
    ) -> dict[str, float]:
        """Seconds from spawn to readiness of every process of `groups`, by process name, once
        all are ready. Fails at once if a process exits first, or after `timeout`."""
        ready: dict[str, float] = {}
        wanted = sum(len(g.names) for g in groups)
        deadline = time.monotonic() + timeout
        while True:
            for group in groups:
                rows = await fetch(
                    monitor,
                    SCHEMA,
                    "bench_gate_waiting",
                    prefix=group.name_prefix,
                    marker=group.claim_marker,
                    gate_pid=self.pid,
                )
                self.polls += 1
                now = time.monotonic()
                spawned = dict(zip(group.names, group.spawned_at, strict=True))
                for row in rows:
                    if row["name"] in spawned and row["name"] not in ready:
                        ready[row["name"]] = now - spawned[row["name"]]
                exited = group.exited()
                if exited:
                    raise RuntimeError(f"{group.label} processes exited before they were ready: {exited}")
            if len(ready) == wanted:
                return ready
            if time.monotonic() > deadline:
                missing = [n for g in groups for n in g.names if n not in ready]
                raise TimeoutError(f"no claim waiting at the gate after {timeout:.0f}s from: {missing}")
            await asyncio.sleep(POLL_SECONDS)

    async def open(self) -> float:
        """Releases the lock; returns the moment it was released (time.monotonic())."""
        assert self.conn is not None
        await self.conn.commit()
        self.opened_at = time.monotonic()
        return self.opened_at

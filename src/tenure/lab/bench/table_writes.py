"""Row writes to a contender's queue table over a drain, from the server's statistics
(pg_stat_user_tables): inserts, updates, and the updates that were HOT (heap-only: the new row
version went on the same page and no index got an entry for it).

What an update costs in index writes: a non-HOT update enters its new row version in every
index on the table whose predicate admits it (always in a non-partial one), a HOT update in
none. Which partial indexes a version entered is not in these counters, so the figures are the
counts per job, with the table's indexes counted beside them (`indexes`).

A backend's counters reach the shared statistics lazily: at most once a second while it works,
and in full when it exits. pg_stat_force_next_flush() flushes only the calling session's, and
the writes measured are the workers', so each reading waits until no other session is left on
the database: every writer has exited, and so has flushed."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.lab.bench.drain import DrainResult
from tenure.lab.bench.queries import fetch
from tenure.lab.bench.server import SCHEMA

#: How long a reading waits for the other sessions to leave; past it the writes are not counted.
SETTLE_SECONDS = 10.0
POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Writes:
    inserts: int
    updates: int
    hot_updates: int


async def _settled(conn: AsyncConnection[Any], table: str) -> Writes | None:
    """The table's counters once this is the only session on the database (None: others stayed)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while int((await fetch(conn, SCHEMA, "bench_other_sessions"))[0]["n"]):
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(POLL_SECONDS)
    row = (await fetch(conn, SCHEMA, "bench_table_writes", table=table))[0]
    return Writes(int(row["inserts"]), int(row["updates"]), int(row["hot_updates"]))


async def counted(dsn: str, table: str, drained: Callable[[], Awaitable[DrainResult]]) -> DrainResult:
    """`drained()`'s result with the writes to `table` per job it finished."""
    async with await connect(dsn) as conn:
        before = await _settled(conn, table)
        # The reads above are commits too: flushed now, they stay out of the drain's commit count.
        await fetch(conn, SCHEMA, "bench_flush_own_stats")
    result = await drained()
    async with await connect(dsn) as conn:
        after = await _settled(conn, table)
    if before is None or after is None:
        return result
    jobs = max(result.jobs, 1)
    updates, hot = after.updates - before.updates, after.hot_updates - before.hot_updates
    return dataclasses.replace(
        result,
        inserts_per_job=(after.inserts - before.inserts) / jobs,
        non_hot_updates_per_job=(updates - hot) / jobs,
        hot_updates_per_job=hot / jobs,
    )

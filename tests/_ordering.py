"""Steps of the per-key ordering tests (tests/db and tests/integration): enqueue keyed jobs, claim
and complete them as one worker, read a job's state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure import JobSpec
from tenure.db.queries import Queries

OWNER = "w1"


async def claim(
    db: AsyncConnection[Any], queries: Queries, *, limit: int = 50, now: datetime | None = None
) -> list[int]:
    jobs = await queries.job_claim(
        db,
        queue="default",
        owner=OWNER,
        limit=limit,
        default_lease_seconds=30,
        default_runtime_seconds=300,
        now=now,
    )
    return [j.id for j in jobs]


async def complete(db: AsyncConnection[Any], queries: Queries, *job_ids: int) -> None:
    tokens = await (
        await db.execute("SELECT id, lease_token FROM tenure.jobs WHERE id = ANY(%s)", (list(job_ids),))
    ).fetchall()
    held = await queries.job_complete_many(db, owner=OWNER, leases=[(i, t) for i, t in tokens])
    assert set(held.values()) == {"done"} and len(held) == len(job_ids)


async def enqueue(db: AsyncConnection[Any], queries: Queries, *keys: str | None) -> list[int]:
    specs = [JobSpec(task="t", ordering_key=k) for k in keys]
    return [j.id for j in await queries.job_insert_many(db, specs)]


async def state(db: AsyncConnection[Any], job_id: int) -> str:
    row = await (await db.execute("SELECT state::text FROM tenure.jobs WHERE id = %s", (job_id,))).fetchone()
    assert row is not None
    return str(row[0])

"""X1: many claimers on separate connections race over one backlog; every tokened lease is
unique and, while leases are valid, every job is claimed exactly once."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import psycopg
from _harness import at, db_now, rows

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

JOBS = 300
CLAIMERS = 12
LEASE = 600.0  # far longer than the test: no lease can expire while it runs


async def claim_all(
    dsn: str, queries: Queries, round_name: str, now: Any = None
) -> dict[str, list[tuple[int, int]]]:
    """Runs CLAIMERS concurrent claim loops until the queue is empty; (job, token) per claimer."""
    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(CLAIMERS)]
    gate = asyncio.Event()
    claims: dict[str, list[tuple[int, int]]] = {}

    async def claimer(index: int, conn: psycopg.AsyncConnection[Any]) -> None:
        owner = f"{round_name}-{index}"
        got = claims.setdefault(owner, [])
        rng = random.Random(index)
        await gate.wait()
        empty_in_a_row = 0
        while empty_in_a_row < 3:
            batch = await queries.job_claim(
                conn,
                queue="default",
                owner=owner,
                limit=rng.randint(1, 7),
                default_lease_seconds=LEASE,
                default_runtime_seconds=LEASE,
                now=now,
            )
            got.extend((job.id, job.lease.token) for job in batch)
            empty_in_a_row = 0 if batch else empty_in_a_row + 1

    try:
        tasks = [asyncio.create_task(claimer(i, c)) for i, c in enumerate(conns)]
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    finally:
        for conn in conns:
            await conn.close()
    return claims


async def test_x01_concurrent_claimers_never_share_a_tokened_lease(
    dsn: str, db: psycopg.AsyncConnection[Any], queries: Queries
) -> None:
    """12 concurrent claimers race over 300 jobs, twice (after a mass expiry): no (job, token) repeats."""
    jobs = await queries.job_insert_many(db, [JobSpec(task="t", payload={"n": i}) for i in range(JOBS)])
    ids = {j.id for j in jobs}

    first = await claim_all(dsn, queries, "r1")
    pairs = [pair for claimed in first.values() for pair in claimed]
    assert len(pairs) == len(set(pairs)), "a (job, token) lease was handed out twice"
    assert Counter(job_id for job_id, _ in pairs) == Counter(ids), "every job must be claimed exactly once"
    assert {token for _, token in pairs} == {1}
    assert sum(1 for claimed in first.values() if claimed) > 1, "the claimers did not actually compete"

    # The database agrees with what each claimer was told.
    stored = await rows(
        db, "SELECT id, lease_owner, lease_token, state::text AS state FROM tenure.jobs ORDER BY id"
    )
    told = {job_id: (owner, token) for owner, claimed in first.items() for job_id, token in claimed}
    assert {r["id"]: (r["lease_owner"], r["lease_token"]) for r in stored} == told
    assert {r["state"] for r in stored} == {"running"}

    # Every lease expires at once (injected clock); the second race must hand out token 2 only.
    later = at(await db_now(db), LEASE + 1)
    recovered = await queries.lease_recover_expired(
        db, limit=1000, backoff_base=0, backoff_cap=0, jitter=0, now=later
    )
    assert sorted((r.job_id, r.token) for r in recovered) == sorted(pairs)
    second = await claim_all(dsn, queries, "r2", now=at(later, 1))
    again = [pair for claimed in second.values() for pair in claimed]
    assert sorted(again) == sorted((job_id, 2) for job_id in ids)
    assert not set(again) & set(pairs)

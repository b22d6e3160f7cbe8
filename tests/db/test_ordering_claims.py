"""Per-key ordering in the claim statement, each test in one rolled-back transaction: only the head
of a key is claimable; retries, a scheduled, dead or crashed head and gaps in the id sequence; the
claim stays an index scan."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from _ordering import OWNER, claim, complete, enqueue, state
from tenure import JobSpec
from tenure.db.ops_queries import OpsQueries
from tenure.db.ordering_queries import OrderingQueries
from tenure.db.queries import Queries


async def db_now(db: AsyncConnection[Any]) -> datetime:
    row = await (await db.execute("SELECT now()")).fetchone()
    assert row is not None
    return row[0]


async def test_only_the_head_of_each_key_is_claimable(db: AsyncConnection[Any], queries: Queries) -> None:
    """Of a key's jobs only the first is claimed; unkeyed jobs are all claimed; the next follows."""
    a1, a2, b1, u1, a3, u2 = await enqueue(db, queries, "a", "a", "b", None, "a", None)
    job = await queries.job_get(db, a2)
    assert job is not None and job.ordering_key == "a"
    assert sorted(await claim(db, queries)) == [a1, b1, u1, u2]
    assert await claim(db, queries) == []  # a2 waits while a1 runs
    await complete(db, queries, a1)
    assert await claim(db, queries) == [a2]
    await complete(db, queries, a2, b1)
    assert await claim(db, queries) == [a3]


async def test_gaps_in_a_keys_ids_do_not_matter(db: AsyncConnection[Any], queries: Queries) -> None:
    """A key's ids need not be contiguous: other keys' and unkeyed jobs between them change nothing."""
    ids = await enqueue(db, queries, "k", None, "x", None, "k", "x", "k")
    k1, k2, k3 = ids[0], ids[4], ids[6]
    first = await claim(db, queries)
    assert k1 in first and k2 not in first and k3 not in first
    await complete(db, queries, *first)
    assert k2 in await claim(db, queries)
    await complete(db, queries, k2)
    assert await claim(db, queries) == [k3]


async def test_a_retrying_head_still_blocks_its_key(db: AsyncConnection[Any], queries: Queries) -> None:
    """A head waiting out its retry's backoff (scheduled) keeps its followers waiting; promoted when
    due, it runs before them."""
    h, f = await enqueue(db, queries, "acct-1", "acct-1")
    assert await claim(db, queries) == [h]
    outcome = await queries.job_fail(
        db, job_id=h, owner=OWNER, token=1, error_code="E", error="boom", retry_delay=60
    )
    assert outcome.outcome == "failed" and outcome.state is not None and outcome.state.value == "scheduled"
    now = await db_now(db)
    assert await claim(db, queries, now=now + timedelta(seconds=30)) == []
    assert await claim(db, queries, now=now + timedelta(seconds=61)) == []  # due, not yet promoted
    assert (await queries.job_promote_due(db, limit=10, now=now + timedelta(seconds=61))).promoted == 1
    assert await claim(db, queries, now=now + timedelta(seconds=61)) == [h]
    await complete(db, queries, h)
    assert await claim(db, queries, now=now + timedelta(seconds=62)) == [f]


async def test_a_scheduled_head_blocks_followers_that_are_due(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """A key's first job enqueued for later (scheduled) blocks the key's later jobs that are due now,
    until it is promoted and has run; the blocked followers are listed as waiting behind nothing dead."""
    now = await db_now(db)
    [head] = await queries.job_insert_many(db, [JobSpec(task="t", ordering_key="k", delay=60)], now=now)
    [follower] = await queries.job_insert_many(db, [JobSpec(task="t", ordering_key="k")], now=now)
    [free] = await queries.job_insert_many(db, [JobSpec(task="t")], now=now)
    assert await state(db, head.id) == "scheduled" and await state(db, follower.id) == "pending"
    assert await claim(db, queries, now=now) == [free.id]
    assert await claim(db, queries, now=now + timedelta(seconds=61)) == []
    await queries.job_promote_due(db, limit=10, now=now + timedelta(seconds=61))
    assert await claim(db, queries, now=now + timedelta(seconds=61)) == [head.id]
    await complete(db, queries, head.id)
    assert await claim(db, queries, now=now + timedelta(seconds=62)) == [follower.id]


async def test_a_dead_head_blocks_its_key_visibly_until_reprocessed(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """A dead head blocks its key and is listed as blocking; reprocessed, it runs first, then the rest."""
    h, f1, _ = await enqueue(db, queries, "order-9", "order-9", "order-9")
    assert await claim(db, queries) == [h]
    await queries.job_fail(db, job_id=h, owner=OWNER, token=1, error_code="E", error="x", retry_delay=None)
    assert await state(db, h) == "dead"
    assert await claim(db, queries) == []
    [blocked] = await OrderingQueries("tenure").blocked(db)
    assert (blocked.id, blocked.ordering_key, blocked.waiting) == (h, "order-9", 2)

    assert await OpsQueries("tenure").dead_reprocess_many(
        db, ids=[h], attempts=1, actor="op", reason="fixed"
    ) == [h]
    assert await claim(db, queries) == [h]
    await complete(db, queries, h)
    assert await OrderingQueries("tenure").blocked(db) == []
    assert await claim(db, queries) == [f1]


async def test_skipping_a_dead_head_lets_its_key_move_on(db: AsyncConnection[Any], queries: Queries) -> None:
    """`ordering skip` cancels the dead head with an audit event; the next job of the key runs."""
    h, f = await enqueue(db, queries, "k", "k")
    await claim(db, queries)
    await queries.job_fail(db, job_id=h, owner=OWNER, token=1, error_code="E", error="x", retry_delay=None)
    ordering = OrderingQueries("tenure")
    skipped = await ordering.skip(db, h, actor="alice", reason="customer refunded by hand")
    assert skipped is not None and skipped.ordering_key == "k"
    assert await state(db, h) == "cancelled"
    assert await ordering.skip(db, h, actor="alice", reason="again") is None  # nothing half-done twice
    event = await (
        await db.execute(
            "SELECT event, worker, error_code, error FROM tenure.job_events WHERE job_id = %s", (h,)
        )
    ).fetchall()
    assert event[-1] == ("cancel", "alice", "ORDERING_SKIP", "customer refunded by hand")
    assert await claim(db, queries) == [f]


async def test_a_crashed_head_is_recovered_and_still_runs_before_its_followers(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """A head whose lease expires waits out its backoff (scheduled, token 1 spent) and is reclaimed
    first."""
    h, _ = await enqueue(db, queries, "k", "k")
    now = await db_now(db)
    assert await claim(db, queries, now=now) == [h]
    later = now + timedelta(seconds=31)
    recovered = await queries.lease_recover_expired(
        db, limit=10, backoff_base=1.0, backoff_cap=1.0, jitter=0.0, now=later
    )
    assert [(r.job_id, r.state.value) for r in recovered] == [(h, "scheduled")]
    assert await claim(db, queries, now=later) == []  # in its backoff, still the head
    await queries.job_promote_due(db, limit=10, now=later + timedelta(seconds=5))
    assert await claim(db, queries, now=later + timedelta(seconds=5)) == [h]
    token = await (await db.execute("SELECT lease_token FROM tenure.jobs WHERE id = %s", (h,))).fetchone()
    assert token == (2,)


def _claim_params(oldest: int, limit: int) -> dict[str, Any]:
    """job_claim's parameters for queue q: `oldest` of `limit` by age, the rest by priority."""
    return {
        "queue": "q",
        "owner": OWNER,
        "limit": limit,
        "oldest": oldest,
        "by_priority": limit - oldest,
        "tasks": None,
        "only": None,
        "default_lease_seconds": 30.0,
        "default_runtime_seconds": 300.0,
        "policy_tasks": [],
        "policy_leases": [],
        "policy_runtimes": [],
        "now": None,
    }


def _scans_of(plan: dict[str, Any], index: str) -> list[dict[str, Any]]:
    found = [plan] if plan.get("Index Name") == index else []
    for child in plan.get("Plans", []):
        found += _scans_of(child, index)
    return found


async def test_a_claim_whose_oldest_lane_came_back_short_does_not_walk_the_priority_lane(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """With fewer claimable jobs than the oldest lane asks for, that lane takes them all and the
    priority lane's index is never scanned (each lane walks the entries claimed jobs left since
    the last vacuum); a full oldest lane still leaves the rest of the batch to the priority lane."""
    await db.execute(
        "INSERT INTO tenure.jobs (queue, task, priority) SELECT 'q', 't', g % 3 FROM generate_series(1, 3) g"
    )
    sql = queries._sql["job_claim"]
    for oldest, priority_scans in ((5, 0), (2, 1)):
        async with db.transaction(force_rollback=True):
            cur = await db.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", _claim_params(oldest, limit=10))
            [[explained]] = await cur.fetchall()
        plan = explained[0]["Plan"]
        assert plan["Actual Rows"] == 3, plan  # every claimable job, either way
        [scan] = _scans_of(plan, "jobs_claimable_idx")
        assert scan["Actual Loops"] == priority_scans, (oldest, json.dumps(plan))


async def test_the_claim_plan_uses_the_claim_index_and_the_ordering_index(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """With a realistic backlog the claim's two lanes are index scans on jobs_claimable_idx and
    jobs_claimable_by_age_idx, and the head probe of keyed rows uses jobs_ordering_idx."""
    await db.execute(
        "INSERT INTO tenure.jobs (queue, task, priority, ordering_key) "
        "SELECT 'q' || (g % 20), 't', (g % 5)::smallint, CASE WHEN g % 3 = 0 THEN 'k' || (g % 500) END "
        "FROM generate_series(1, 30000) g"
    )
    await db.execute("ANALYZE tenure.jobs")
    sql = queries._sql["job_claim"]
    params = _claim_params(oldest=1, limit=10) | {"queue": "q7"}
    cur = await db.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)  # plans only, runs nothing
    [[plan]] = await cur.fetchall()
    text = json.dumps(plan)
    assert "jobs_claimable_idx" in text, text
    assert "jobs_claimable_by_age_idx" in text, text
    assert "jobs_ordering_idx" in text, text
    assert '"Node Type": "Seq Scan"' not in text, text

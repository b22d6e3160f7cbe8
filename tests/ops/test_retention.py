"""Retention: the maintenance pass deletes only succeeded and cancelled jobs past their queue's
retention (dead ones only when asked), keeps the history of jobs in play, and shares its work
safely between concurrent passes. Migration 0003's churn tuning is on the jobs table."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from tenure.db.migrate import migrate
from tenure.db.pool import open_pool
from tenure.worker.maintenance import RetentionPolicy, prune

DAY = 86400.0
STATES = ("scheduled", "pending", "running", "succeeded", "cancelled", "dead")


async def make_jobs(
    db: psycopg.AsyncConnection[Any], queue: str, age: str, count: int = 1
) -> dict[str, list[int]]:
    """`count` jobs in each state on `queue`, the terminal ones finished `age` ago, each with an audit row."""
    made: dict[str, list[int]] = {}
    for state in STATES:
        cur = await db.execute(
            "INSERT INTO tenure.jobs (queue, task, state, attempt_count, lease_token, attempted_at,"
            " lease_owner, lease_expires_at, lease_deadline, finished_at)"
            " SELECT %(queue)s, 'ops.t', %(state)s::tenure.job_state,"
            "   CASE WHEN %(state)s IN ('scheduled', 'pending') THEN 0 ELSE 1 END, 1, now(),"
            "   CASE WHEN %(state)s = 'running' THEN 'w1' END,"
            "   CASE WHEN %(state)s = 'running' THEN now() + interval '1 hour' END,"
            "   CASE WHEN %(state)s = 'running' THEN now() + interval '1 hour' END,"
            "   CASE WHEN %(state)s IN ('succeeded', 'cancelled', 'dead') THEN now() - %(age)s::interval END"
            " FROM generate_series(1, %(count)s) RETURNING id",
            {"queue": queue, "state": state, "age": age, "count": count},
        )
        made[state] = [r[0] for r in await cur.fetchall()]
        await db.execute(
            "INSERT INTO tenure.job_events (job_id, event, token, at)"
            " SELECT unnest(%s::bigint[]), 'retry', 1, now() - %s::interval",
            (made[state], age),
        )
    return made


async def surviving(db: psycopg.AsyncConnection[Any]) -> set[int]:
    return {r[0] for r in await (await db.execute("SELECT id FROM tenure.jobs")).fetchall()}


async def with_events(db: psycopg.AsyncConnection[Any]) -> set[int]:
    return {
        r[0] for r in await (await db.execute("SELECT DISTINCT job_id FROM tenure.job_events")).fetchall()
    }


async def test_prune_never_touches_scheduled_pending_running_or_dead_jobs(
    dsn: str, db: psycopg.AsyncConnection[Any]
) -> None:
    """Old succeeded and cancelled jobs go with their audit rows; scheduled, pending, running and dead
    jobs and their history stay, however old; young finished jobs stay."""
    old = await make_jobs(db, "emails", "10 days")
    young = await make_jobs(db, "emails", "1 hour")
    pool = await open_pool(dsn, max_size=2)
    try:
        report = await prune(pool, "tenure", RetentionPolicy(finished_seconds=7 * DAY, audit_seconds=7 * DAY))
    finally:
        await pool.close()
    gone = set(old["succeeded"] + old["cancelled"])
    everything = {i for made in (old, young) for ids in made.values() for i in ids}
    assert report.finished_jobs == 2 and report.dead_jobs == 0
    assert await surviving(db) == everything - gone
    assert await with_events(db) == everything - gone  # history of jobs in play kept, even 10 days old


async def test_per_queue_retention_and_dead_retention_only_when_asked(
    dsn: str, db: psycopg.AsyncConnection[Any]
) -> None:
    """A queue's own retention overrides the default; dead jobs are purged only with dead_seconds set."""
    emails = await make_jobs(db, "emails", "10 days")
    audit = await make_jobs(db, "audit", "10 days")
    pool = await open_pool(dsn, max_size=2)
    try:
        policy = RetentionPolicy(finished_seconds=7 * DAY, per_queue={"audit": 365 * DAY})
        assert (await prune(pool, "tenure", policy)).finished_jobs == 2
        assert set(audit["succeeded"] + audit["cancelled"]) <= await surviving(db)
        assert not set(emails["succeeded"] + emails["cancelled"]) & await surviving(db)
        assert set(emails["dead"] + audit["dead"]) <= await surviving(db)
        with_dead = RetentionPolicy(
            finished_seconds=7 * DAY, per_queue={"audit": 365 * DAY}, dead_seconds=5 * DAY
        )
        assert (await prune(pool, "tenure", with_dead)).dead_jobs == 2
    finally:
        await pool.close()
    left = await surviving(db)
    assert not set(emails["dead"] + audit["dead"]) & left
    waiting = ("scheduled", "pending", "running")
    assert {i for state in waiting for made in (emails, audit) for i in made[state]} <= left


async def test_concurrent_passes_share_the_work_and_delete_each_row_once(
    dsn: str, db: psycopg.AsyncConnection[Any]
) -> None:
    """Four passes at once with small batches delete every expired job exactly once, without errors."""
    made = await make_jobs(db, "bulk", "10 days", count=200)
    pool = await open_pool(dsn, max_size=8)
    try:
        policy = RetentionPolicy(finished_seconds=DAY, batch=25, max_batches=100)
        reports = await asyncio.gather(*(prune(pool, "tenure", policy) for _ in range(4)))
    finally:
        await pool.close()
    assert sum(r.finished_jobs for r in reports) == 400
    assert await surviving(db) == set(made["scheduled"] + made["pending"] + made["running"] + made["dead"])


async def test_injected_clock_ages_jobs_without_waiting(dsn: str, db: psycopg.AsyncConnection[Any]) -> None:
    """With `now` a week ahead, a job finished an hour ago is past a one-day retention."""
    made = await make_jobs(db, "emails", "1 hour")
    pool = await open_pool(dsn, max_size=2)
    try:
        policy = RetentionPolicy(finished_seconds=DAY)
        assert (await prune(pool, "tenure", policy)).finished_jobs == 0
        later = datetime.now(UTC) + timedelta(days=7)
        assert (await prune(pool, "tenure", policy, now=later)).finished_jobs == 2
    finally:
        await pool.close()
    assert not set(made["succeeded"] + made["cancelled"]) & await surviving(db)


async def test_jobs_table_is_tuned_for_churn_in_fresh_and_migrated_schemas(empty_dsn: str) -> None:
    """Migration 0003's fillfactor and autovacuum settings are the same from schema.sql and the steps."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "t_fresh")
        await migrate(conn, "t_steps", fresh_snapshot=False)
        options = {}
        for schema in ("t_fresh", "t_steps"):
            cur = await conn.execute(
                "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = 'jobs'",
                (schema,),
            )
            options[schema] = sorted((await cur.fetchone())[0])
    assert options["t_fresh"] == options["t_steps"]
    assert "fillfactor=90" in options["t_fresh"]
    assert "autovacuum_vacuum_scale_factor=0.01" in options["t_fresh"]


async def test_finished_workflows_are_pruned_and_failed_or_unfinished_ones_kept(
    dsn: str, db: psycopg.AsyncConnection[Any]
) -> None:
    """A workflow whose steps all succeeded (or were cancelled) long ago goes, with its steps and
    dependencies; one with a dead step, one still waiting and one finished recently stay."""
    from tenure.db.workflow_queries import WorkflowQueries

    queries = WorkflowQueries("tenure")
    steps = [
        {"name": "a", "task": "ops.t", "queue": "q"},
        {"name": "b", "task": "ops.t", "queue": "q", "after": ["a"]},
    ]
    ids = [(await queries.enqueue(db, name=f"w{i}", on_dead="hold", steps=steps)).id for i in range(4)]
    done, dead, waiting, recent = ids
    await db.execute(
        "UPDATE tenure.workflow_steps SET state = 'succeeded', remaining = 0,"
        " finished_at = now() - interval '10 days' WHERE workflow_id = ANY(%s)",
        ([done, dead],),
    )
    await db.execute(
        "UPDATE tenure.workflow_steps SET state = 'dead' WHERE workflow_id = %s AND name = 'b'", (dead,)
    )
    await db.execute(
        "UPDATE tenure.workflow_steps SET state = 'succeeded', remaining = 0, finished_at = now()"
        " WHERE workflow_id = %s",
        (recent,),
    )
    await db.execute("UPDATE tenure.workflows SET created_at = now() - interval '11 days'")
    await db.commit()
    pool = await open_pool(dsn, max_size=2)
    try:
        report = await prune(pool, "tenure", RetentionPolicy(finished_seconds=7 * DAY, audit_seconds=7 * DAY))
    finally:
        await pool.close()
    left = {r[0] for r in await (await db.execute("SELECT id FROM tenure.workflows")).fetchall()}
    assert report.workflows == 1 and left == {dead, waiting, recent}
    orphans = await (await db.execute(
        "SELECT count(*) FROM tenure.workflow_steps WHERE workflow_id = %s", (done,)
    )).fetchone()  # fmt: skip
    assert orphans == (0,)

"""Published values: a running job publishes a value for whoever enqueued it (on its workflow
when it is a step), a caller waits for it and is woken by the publish, the latest value of a key
stands, a holder that lost its lease publishes nothing, and bad input is refused before writing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _inprocess import running
from psycopg import AsyncConnection

from tenure import JobContext, Tenure, ValidationError, Workflow
from tenure.db.published_queries import PublishedQueries
from tenure.db.queries import Queries


async def test_a_workflow_publishes_its_progress_and_its_caller_waits_for_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Two steps publish on their workflow; a caller waiting before anything was published gets
    the value when it comes; the second publish of a key replaces the first; show lists them."""
    app = Tenure(dsn)
    go = asyncio.Event()

    @app.task(name="p.fetch", queue="p")
    async def fetch(ctx: JobContext) -> int:
        await ctx.publish("stage", {"at": "fetching"})
        await go.wait()
        await ctx.publish("stage", {"at": "fetched", "rows": 3})
        return 3

    @app.task(name="p.report", queue="p")
    def report(ctx: JobContext, rows: int) -> str:
        ctx.publish_sync("report", f"{rows} rows")
        return "done"

    wf = Workflow("import")
    fetched = wf.step(fetch, name="fetch")
    wf.step(report, after=fetched, input="rows", name="report")
    made = await app.enqueue_workflow(wf)
    assert await app.published("stage", workflow_id=made.id) is None  # looked once: nothing yet
    async with running(app):
        first = await app.published("stage", workflow_id=made.id, timeout=15)
        assert first is not None and first.value == {"at": "fetching"} and first.by_job == made.jobs["fetch"]
        waiting = asyncio.create_task(app.published("report", workflow_id=made.id, timeout=15))
        go.set()
        got = await waiting
        assert got is not None and got.value == "3 rows" and got.by_job == made.jobs["report"]
        await app.result(made.jobs["report"], timeout=15)
    stage = await app.published("stage", workflow_id=made.id)
    assert stage is not None and stage.value == {"at": "fetched", "rows": 3}
    assert [(v.key, v.value) for v in await app.workflow_published(made.id)] == [
        ("report", "3 rows"),
        ("stage", {"at": "fetched", "rows": 3}),
    ]
    cur = await db.execute("SELECT count(*) FROM tenure.published_values")
    assert await cur.fetchone() == (2,)
    await app.close()


async def test_a_job_that_is_no_step_publishes_on_itself(dsn: str) -> None:
    """A plain job's value is read by its job id; a workflow id of the same number finds nothing."""
    app = Tenure(dsn)

    @app.task(name="p.alone")
    async def alone(ctx: JobContext) -> None:
        await ctx.publish("progress", 0.5)

    job = await app.enqueue("p.alone", {})
    async with running(app):
        got = await app.published("progress", job_id=job.id, timeout=15)
    assert got is not None and got.value == 0.5
    assert await app.published("progress", workflow_id=job.id) is None
    with pytest.raises(ValidationError, match="one of them"):
        await app.published("progress")
    await app.close()


async def test_a_holder_that_lost_its_lease_publishes_nothing(dsn: str, db: AsyncConnection[Any]) -> None:
    """The fence: a publish with an old token (its lease recovered and the job claimed again) is
    refused, nothing written; the current holder's is written."""
    app = Tenure(dsn)
    job = await app.enqueue("p.fenced", {}, queue="p")
    q, pub = Queries("tenure"), PublishedQueries("tenure")
    (first,) = await q.job_claim(
        db, queue="p", owner="w1", limit=1, default_lease_seconds=30, default_runtime_seconds=60
    )
    await db.execute("UPDATE tenure.jobs SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, "
                     "lease_deadline = NULL WHERE id = %s", (job.id,))  # fmt: skip
    (second,) = await q.job_claim(
        db, queue="p", owner="w2", limit=1, default_lease_seconds=30, default_runtime_seconds=60
    )
    stale = await pub.publish(
        db, job_id=job.id, owner="w1", token=first.lease.token, key="k", value_json='"old"'
    )
    fresh = await pub.publish(
        db, job_id=job.id, owner="w2", token=second.lease.token, key="k", value_json='"new"'
    )
    assert (stale, fresh) == ("lost", "published")
    got = await pub.get(db, key="k", workflow_id=None, job_id=job.id)
    assert got is not None and got.value == "new"
    await app.close()


async def test_a_publish_that_is_not_json_or_too_large_is_refused_and_the_attempt_goes_on(dsn: str) -> None:
    """A bad key, a value that is not JSON or over 64 KiB: ValidationError from ctx.publish,
    nothing written; the handler that catches it still succeeds."""
    app = Tenure(dsn)
    seen: list[str] = []

    @app.task(name="p.bad")
    async def bad(ctx: JobContext) -> str:
        for key, value in (("", 1), ("k", {1, 2}), ("k", "x" * 70_000)):
            try:
                await ctx.publish(key, value)
            except ValidationError as exc:
                seen.append(str(exc).split(",")[0])
        return "ok"

    job = await app.enqueue("p.bad", {})
    async with running(app):
        assert await app.result(job.id, timeout=15) == "ok"
    assert len(seen) == 3
    assert await app.published("k", job_id=job.id) is None
    await app.close()


async def test_deleting_a_job_or_a_workflow_finds_its_published_values_by_index(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Deleting a job, or a workflow, deletes its published values through the foreign keys
    without a sequential scan of published_values (which made a retention pass grow with the
    values kept), on a table never analyzed, as a new one is."""
    app = Tenure(dsn)

    @app.task(name="p.kept", queue="p")
    async def kept(ctx: JobContext) -> None:
        """Never run: its jobs only own values."""

    jobs = [(await app.enqueue(kept)).id for _ in range(3)]
    wf = Workflow("owner")
    wf.step(kept, name="only")
    workflow = (await app.enqueue_workflow(wf)).id
    # Two thousand values of other owners around the ones deleted below.
    await db.execute(
        """INSERT INTO tenure.published_values (workflow_id, job_id, key, value, published_at, by_job, token)
           SELECT CASE WHEN k %% 2 = 0 THEN %(workflow)s END, CASE WHEN k %% 2 = 1 THEN %(job)s END,
                  'k' || k, '{}'::jsonb, now(), %(job)s, 1
           FROM generate_series(1, 2000) AS k""",
        {"workflow": workflow, "job": jobs[0]},
    )
    await db.execute(
        """INSERT INTO tenure.published_values (workflow_id, job_id, key, value, published_at, by_job, token)
           VALUES (NULL, %(job)s, 'mine', '1', now(), %(job)s, 1)""",
        {"job": jobs[1]},
    )
    for table, key in (("jobs", jobs[1]), ("jobs", jobs[2]), ("workflows", workflow)):
        async with db.transaction(force_rollback=True):
            await db.execute(f"DELETE FROM tenure.{table} WHERE id = %s", (key,))
            cur = await db.execute(
                "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables"
                " WHERE schemaname = 'tenure' AND relname = 'published_values'"
            )
            seq_scans, index_scans = await cur.fetchone() or (None, None)
            assert seq_scans == 0 and index_scans, (table, seq_scans, index_scans)
    await app.close()

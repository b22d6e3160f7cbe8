"""The lease and the runtime a claim grants, each test in one rolled-back transaction: a task the
worker sends a policy for gets its own, every other task the worker's defaults (worked out once a
claim), and the lease never runs past the runtime; the worker sends only the policies that differ
from its defaults."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from tenure.db.queries import Queries, TaskLeasePolicy
from tenure.model.jobs import JobSpec
from tenure.tasks import TaskRegistry
from tenure.worker.claimer import claim_terms
from tenure.worker.options import WorkerOptions


async def _claim_spans(
    db: AsyncConnection[Any], queries: Queries, policies: list[TaskLeasePolicy], now: datetime
) -> dict[str, tuple[float, float]]:
    """Each claimed job's task -> (lease seconds, runtime seconds) from the claim's time."""
    jobs = await queries.job_claim(
        db,
        queue="terms",
        owner="w",
        limit=10,
        default_lease_seconds=30,
        default_runtime_seconds=600,
        policies=policies,
        now=now,
    )
    return {
        j.task: ((j.lease.expires_at - now).total_seconds(), (j.lease.deadline - now).total_seconds())
        for j in jobs
    }


async def test_a_claim_gives_each_task_its_own_lease_and_the_rest_the_defaults(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """With policies for two of three tasks, those two get theirs (a lease capped at a shorter
    runtime), the third the defaults; with no policy sent at all, every task gets the defaults."""
    tasks = ["plain", "long_lease", "short_runtime"]
    await queries.job_insert_many(db, [JobSpec(task=t, queue="terms") for t in tasks])
    now = (await (await db.execute("SELECT now()")).fetchone() or [None])[0]
    assert isinstance(now, datetime)
    policies = [TaskLeasePolicy("long_lease", 90, 3600), TaskLeasePolicy("short_runtime", 30, 12.5)]
    assert await _claim_spans(db, queries, policies, now) == {
        "plain": (30.0, 600.0),
        "long_lease": (90.0, 3600.0),
        "short_runtime": (12.5, 12.5),
    }
    await queries.job_insert_many(db, [JobSpec(task=t, queue="terms") for t in tasks])
    later = now + timedelta(seconds=1)
    assert await _claim_spans(db, queries, [], later) == dict.fromkeys(tasks, (30.0, 600.0))


def test_a_worker_sends_only_the_policies_that_differ_from_its_defaults() -> None:
    """claim_terms lists every task the worker runs, and a lease policy only for a task whose own
    lease or runtime differs from the worker's (a task that repeats the defaults sends none)."""
    registry = TaskRegistry()

    async def plain(ctx: Any) -> None: ...
    async def same(ctx: Any) -> None: ...
    async def own(ctx: Any) -> None: ...

    registry.register(plain, name="plain")
    registry.register(same, name="same", lease_seconds=45, max_runtime_seconds=900)
    registry.register(own, name="own", max_runtime_seconds=60)
    tasks, policies = claim_terms(registry, WorkerOptions(lease_seconds=45, max_runtime_seconds=900))
    assert tasks == ["own", "plain", "same"]
    assert policies == [TaskLeasePolicy("own", 45, 60)]

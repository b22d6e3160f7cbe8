"""The shortest path through the queue: enqueue, claim, fenced completion."""

from __future__ import annotations

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec, JobState


async def test_enqueued_job_is_claimed_once_and_completes_under_its_token(db, queries: Queries) -> None:
    """A job goes pending -> running (token 1) -> succeeded, and a second claim finds nothing."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t", payload={"a": 1})])
    claimed = await queries.job_claim(
        db, queue="default", owner="w1", limit=5, default_lease_seconds=30, default_runtime_seconds=60
    )
    assert [c.id for c in claimed] == [job.id] and claimed[0].lease.token == 1
    assert (
        await queries.job_claim(
            db, queue="default", owner="w2", limit=5, default_lease_seconds=30, default_runtime_seconds=60
        )
        == []
    )
    assert await queries.job_complete_many(db, owner="w1", leases=[(job.id, 1)]) == {(job.id, 1): "done"}
    stored = await queries.job_get(db, job.id)
    assert stored is not None and stored.state is JobState.SUCCEEDED and stored.finished_at is not None

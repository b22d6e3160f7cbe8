"""The query tests' fixture: a test's writes stay inside its own transaction, which is rolled back."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec


async def test_a_query_tests_writes_are_never_committed(
    db: AsyncConnection[Any], queries: Queries, shared_dsn: str
) -> None:
    """A job a query test inserts, and claims through a statement with savepoints of its own, is
    invisible to every other session: nothing of it can outlive the test's rollback."""
    [job] = await queries.job_insert_many(db, [JobSpec(task="t")])
    claimed = await queries.job_claim(
        db, queue="default", owner="w", limit=1, default_lease_seconds=30, default_runtime_seconds=60
    )
    assert [c.id for c in claimed] == [job.id]
    async with await AsyncConnection.connect(shared_dsn, autocommit=True) as other:
        row = await (
            await other.execute("SELECT count(*) FROM tenure.jobs WHERE id = %s", (job.id,))
        ).fetchone()
    assert row == (0,)

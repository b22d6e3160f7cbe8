"""enqueue(), the SQL way in: the docs' examples run as written, a job is completed from its
task's declared policy, its unique key is the one the Python client derives, and a job enqueued
from SQL runs on a worker like any other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _inprocess import running, wait_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import AsyncConnection

import tenure
from tenure import JobContext, Tenure
from tenure.db.queries import Queries
from tenure.model.unique import Unique, held_key
from tenure.tasks import TaskPolicy
from tenure.worker.worker import task_declaration

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def sql_blocks() -> list[str]:
    return re.findall(r"^```sql\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


async def rows(db: AsyncConnection[Any], query: str, params: Any = None) -> list[tuple[Any, ...]]:
    return await (await db.execute(query, params)).fetchall()


async def test_the_docs_sql_blocks_run_as_written(db: AsyncConnection[Any]) -> None:
    """docs/sql.md's blocks, in order: a job from psql, a delayed one on its own queue, a
    trigger that enqueues a receipt in the payment's transaction, once per order, and a signal
    (kept: no job waits for it here)."""
    blocks = sql_blocks()
    assert len(blocks) == 4
    [(job_id, _, existing, scheduled)] = await rows(db, blocks[0])
    assert (existing, scheduled) == (False, False)
    [(_, scheduled)] = await rows(db, blocks[1])
    assert scheduled
    await db.execute(blocks[2])
    receipts = await rows(
        db,
        "SELECT payload, unique_key, state::text FROM tenure.jobs WHERE payload ? 'email' AND id <> %s",
        [job_id],
    )
    assert receipts == [
        ({"order_id": 7, "email": "grace@example.com"}, "emails.send_receipt:receipt-7", "pending")
    ]
    await db.execute("UPDATE orders SET paid = false WHERE id = 7")
    await db.execute("UPDATE orders SET paid = true WHERE id = 7")
    assert len(await rows(db, "SELECT 1 FROM tenure.jobs WHERE task = 'emails.send_receipt'")) == 2
    [(_, outcome, woken)] = await rows(db, blocks[3])
    assert (outcome, woken) == ("kept", None)


async def test_a_rolled_back_trigger_leaves_no_job(db: AsyncConnection[Any]) -> None:
    """The trigger's job is written in the payment's transaction: rolled back, it is gone too."""
    await db.execute(sql_blocks()[2])
    await db.execute("DELETE FROM tenure.jobs")
    async with db.transaction(force_rollback=True):
        await db.execute("INSERT INTO orders (id, email) VALUES (8, 'x@example.com')")
        await db.execute("UPDATE orders SET paid = true WHERE id = 8")
        assert len(await rows(db, "SELECT 1 FROM tenure.jobs")) == 1
    assert await rows(db, "SELECT count(*) FROM tenure.jobs") == [(0,)]


async def test_a_job_is_completed_from_its_tasks_declared_policy(db: AsyncConnection[Any]) -> None:
    """Once a worker declared the task, naming it is enough: its queue, priority, budget and
    unique fields apply, and the same order from the Python client and from SQL is one job."""
    policy = TaskPolicy(queue="billing", priority=3, max_attempts=7, unique=Unique(fields=("order",)))
    await Queries("tenure").task_policies_declare(db, [task_declaration("billing.refund", policy)], "w1")
    [(first, was_there)] = await rows(
        db, 'SELECT id, existing FROM tenure.enqueue(\'billing.refund\', \'{"order": 5, "note": "x"}\')'
    )
    assert not was_there
    stored = await rows(
        db, "SELECT queue, priority, max_attempts, unique_key FROM tenure.jobs WHERE id = %s", [first]
    )
    assert stored == [("billing", 3, 7, 'billing.refund:{"order":5}')]
    app = Tenure(db.info.dsn)
    app.task(name="billing.refund", queue="billing", unique=Unique(fields=("order",)))(
        lambda ctx, order: None
    )
    again = await app.client.enqueue_many(
        [
            tenure.JobSpec(
                task="billing.refund", queue="billing", payload={"order": 5}, unique=Unique(fields=("order",))
            )
        ]
    )
    await app.close()
    assert again[0].existing and again[0].id == first
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unique_key"):
        await db.execute("SELECT * FROM tenure.enqueue('billing.refund', '{\"order\": [1, 2]}')")


#: Text PostgreSQL can store (no NUL; the client refuses it too) and that is valid Unicode.
TEXT = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**62), max_value=2**62), st.text(TEXT, max_size=30)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.dictionaries(st.text(TEXT, min_size=1, max_size=12), SCALARS, max_size=6))
def test_sql_and_python_derive_the_same_unique_key(payload: dict[str, Any], dsn: str) -> None:
    """For payloads of strings, integers, booleans and nulls, the database's key is the client's,
    whole payload or chosen fields, short or digested."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for fields in (None, tuple(sorted(payload))[:2]):
            part = Unique(fields=fields).part_for("t", payload)
            row = conn.execute(
                "SELECT tenure.unique_held_key('t', tenure.unique_part(%s, %s))",
                [psycopg.types.json.Jsonb(payload), None if fields is None else list(fields)],
            ).fetchone()
            assert row == (held_key("t", part),)


async def test_a_job_enqueued_from_sql_runs_on_a_worker(dsn: str, db: AsyncConnection[Any]) -> None:
    """A thread handler's task declared by its worker: a job enqueued by name from SQL is claimed
    from the task's queue and runs with its payload."""
    app = Tenure(dsn)
    seen: list[int] = []

    @app.task(name="sql.job", queue="from-sql")
    def handle(ctx: JobContext, n: int) -> None:
        seen.append(n)

    async with running(app):
        [(job_id,)] = await rows(db, "SELECT id FROM tenure.enqueue('sql.job', '{\"n\": 9}')")
        await wait_state(db, job_id, "succeeded")
    assert seen == [9]

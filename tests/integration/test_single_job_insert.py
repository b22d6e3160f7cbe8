"""A lone job (no ordering, unique or caller's idempotency key) goes in through job_insert_one;
every other enqueue through job_insert_many. The two must store the same row and say the same
things about it: state, run time, notification."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tenure.db.channels import SCHEDULED_PREFIX, notify_channel
from tenure.db.queries import Queries
from tenure.db.sync.producer_queries import ProducerQueries as BlockingProducerQueries
from tenure.db.wakeups import Wakeups
from tenure.model.jobs import JobSpec

#: Columns a stored job's enqueue decides (its id, key and clock-derived times aside).
STORED = (
    "queue, task, payload, priority, state::text, max_attempts, attempt_count, result_wanted, "
    "trace_context, ordering_key, unique_key, unique_states, available_at - created_at AS wait"
)
NOW = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)

SPECS = [
    JobSpec(task="a", payload={}),
    JobSpec(
        task="a", payload={"n": 1, "s": "é\u2028x", "l": [1, 2.5, None, True], "d": {"k": "v"}}, queue="q1"
    ),
    JobSpec(task="b", payload={"x": 1}, queue="q2", priority=-32768, max_attempts=1, result_wanted=True),
    JobSpec(task="b", payload={}, queue="q2", priority=32767, max_attempts=1000),
    JobSpec(task="c", payload={}, queue="q3", delay=90.5),
    JobSpec(task="c", payload={}, queue="q3", delay=0),
    JobSpec(task="c", payload={}, queue="q3", run_at=NOW + timedelta(hours=2)),
    JobSpec(task="c", payload={}, queue="q3", run_at=NOW - timedelta(hours=2)),
    JobSpec(task="d", payload={"p": 1}, queue="q4", trace_context={"traceparent": "00-ab-cd-01"}),
]


async def stored(db: AsyncConnection[Any], ids: list[int]) -> list[tuple[Any, ...]]:
    rows = await (
        await db.execute(f"SELECT {STORED} FROM tenure.jobs WHERE id = ANY(%s) ORDER BY id", [ids])
    ).fetchall()
    return [tuple(r) for r in rows]


async def test_a_lone_job_is_stored_as_the_batch_statement_stores_it(
    dsn: str, db: AsyncConnection[Any], queries: Queries
) -> None:
    """For each shape of plain job, job_insert_one and job_insert_many store equal rows and
    return the same run time and the same scheduled-or-not, with the database's or an injected clock."""
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        for now in (None, NOW):
            for spec in SPECS:
                one = await queries.job_insert_many(conn, [spec], now=now, wakeups=(w1 := Wakeups()))
                # Two specs force the batch statement; the second is a throwaway twin.
                many = await queries.job_insert_many(conn, [spec, spec], now=now, wakeups=(w2 := Wakeups()))
                assert len(one) == 1 and len(many) == 2
                assert not one[0].existing and not many[0].existing
                assert (w1.queues, w1.first_scheduled is None) == (w2.queues, w2.first_scheduled is None), (
                    spec
                )
                if now is not None:
                    assert one[0].available_at == many[0].available_at, spec
                stored_one, stored_many = await stored(db, [one[0].id]), await stored(db, [many[0].id])
                if now is None and spec.run_at is not None:
                    # A fixed run time less each statement's own clock: only an injected one is equal.
                    stored_one, stored_many = [r[:-1] for r in stored_one], [r[:-1] for r in stored_many]
                assert stored_one == stored_many, spec
                assert one[0].idempotency_key != many[0].idempotency_key


async def test_a_lone_job_notifies_inside_the_callers_transaction_at_its_commit(
    dsn: str, queries: Queries
) -> None:
    """Inside a transaction job_insert_one notifies the job's queue (a due job) or the promoters
    (a scheduled one, with its run time), delivered only when the transaction commits."""
    channel = notify_channel("tenure")
    async with (
        await AsyncConnection.connect(dsn, autocommit=True) as listener,
        await AsyncConnection.connect(dsn) as conn,
    ):
        await listener.execute(f'LISTEN "{channel}"')
        later = datetime.now(UTC) + timedelta(hours=1)
        due = await queries.job_insert_many(conn, [JobSpec(task="a", payload={}, queue="mail")])
        scheduled = await queries.job_insert_many(
            conn, [JobSpec(task="a", payload={}, queue="mail", run_at=later)]
        )
        assert len(due) == len(scheduled) == 1
        got: list[str] = []

        async def collect(limit: int, timeout: float) -> None:
            async with asyncio.timeout(timeout):
                async for note in listener.notifies():
                    got.append(note.payload)
                    if len(got) >= limit:
                        return

        with contextlib.suppress(TimeoutError):
            await collect(1, 0.3)
        assert got == [], "delivered before the commit"
        await conn.commit()
        await collect(2, 5.0)
        assert got[0] == "mail"
        assert got[1].startswith(SCHEDULED_PREFIX)
        assert abs(float(got[1][len(SCHEDULED_PREFIX) :]) - later.timestamp()) < 1e-3


def test_the_sync_client_path_stores_the_same_row(dsn: str) -> None:
    """The blocking twin takes the same statement for a lone job and stores the same row as its batch path."""
    blocking = BlockingProducerQueries("tenure")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for spec in SPECS:
            one = blocking.job_insert_many(conn, [spec], now=NOW, wakeups=Wakeups())
            many = blocking.job_insert_many(conn, [spec, spec], now=NOW, wakeups=Wakeups())
            assert one[0].available_at == many[0].available_at
            rows = conn.execute(
                f"SELECT {STORED} FROM tenure.jobs WHERE id = ANY(%s) ORDER BY id",
                [[one[0].id, many[0].id]],
            ).fetchall()
            assert tuple(rows[0]) == tuple(rows[1]), spec

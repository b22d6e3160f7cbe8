"""The database itself refuses illegal job states, and the token only grows through the public
queries."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection

from tenure.db.control_queries import ControlQueries
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec, JobState
from tenure.model.validation import QUEUE_PATTERN

CLAIM = {"queue": "default", "limit": 10, "default_lease_seconds": 30, "default_runtime_seconds": 60}


async def db_now(conn: AsyncConnection[Any]) -> datetime:
    row = await (await conn.execute("SELECT now()")).fetchone()
    assert row is not None
    return row[0]


async def pending_job(db: AsyncConnection[Any], queries: Queries) -> int:
    [job] = await queries.job_insert_many(db, [JobSpec(task="t", max_attempts=3)])
    return job.id


async def running_job(db: AsyncConnection[Any], queries: Queries) -> int:
    job_id = await pending_job(db, queries)
    [claimed] = await queries.job_claim(db, owner="w", **CLAIM)
    assert claimed.id == job_id
    return job_id


ILLEGAL = [
    ("pending", "lease_owner = 'w'", "jobs_running_has_lease"),
    ("pending", "lease_expires_at = now()", "jobs_running_has_lease"),
    ("pending", "finished_at = now()", "jobs_finished_iff_terminal"),
    ("pending", "attempt_count = max_attempts, lease_token = max_attempts", "jobs_waiting_has_budget"),
    ("scheduled", "attempt_count = max_attempts, lease_token = max_attempts", "jobs_waiting_has_budget"),
    ("scheduled", "lease_owner = 'w'", "jobs_running_has_lease"),
    ("scheduled", "finished_at = now()", "jobs_finished_iff_terminal"),
    ("pending", "attempt_count = max_attempts + 1", "jobs_attempts_in_budget"),
    ("pending", "max_attempts = 0", "jobs_attempts_in_budget"),
    ("pending", "attempt_count = -1", "jobs_attempts_in_budget"),
    ("pending", "payload = '[1, 2]'", "jobs_payload_object"),
    ("pending", "queue = 'bad queue'", "jobs_queue_format"),
    ("pending", "task = ''", "jobs_task_length"),
    ("pending", "last_error = repeat('x', 2001)", "jobs_error_bounded"),
    ("pending", "state = 'succeeded'", "jobs_finished_iff_terminal"),
    (
        "pending",
        "state = 'running', lease_owner = 'w', lease_expires_at = now(), lease_deadline = now()",
        "jobs_running_was_claimed",
    ),
    ("running", "lease_expires_at = NULL", "jobs_running_has_lease"),
    ("running", "lease_owner = NULL", "jobs_running_has_lease"),
    ("running", "lease_deadline = NULL", "jobs_running_has_lease"),
    ("pending", "attempt_count = 1", "jobs_token_counts_claims"),
    ("running", "finished_at = now()", "jobs_finished_iff_terminal"),
    ("running", "state = 'pending'", "jobs_running_has_lease"),
    ("running", "state = 'dead', finished_at = now()", "jobs_running_has_lease"),
]


async def test_check_constraints_reject_illegal_states(db: AsyncConnection[Any], queries: Queries) -> None:
    """Each UPDATE into an illegal combination is refused by the named CHECK; the row is unchanged."""
    running = await running_job(db, queries)
    pending = await pending_job(db, queries)
    [scheduled] = await queries.job_insert_many(db, [JobSpec(task="t", max_attempts=3, delay=3600)])
    assert (await queries.job_get(db, scheduled.id)).state is JobState.SCHEDULED  # type: ignore[union-attr]
    jobs = {"running": running, "pending": pending, "scheduled": scheduled.id}
    for start, assignment, constraint in ILLEGAL:
        job_id = jobs[start]
        before = await queries.job_get(db, job_id)
        with pytest.raises(psycopg.errors.CheckViolation) as info:
            async with db.transaction():
                await db.execute(f"UPDATE tenure.jobs SET {assignment} WHERE id = %s", (job_id,))
        assert info.value.diag.constraint_name == constraint, assignment
        assert await queries.job_get(db, job_id) == before


QUEUE_NAMES = [
    "a",
    "billing.v2",
    "Emails:eu-1_x",
    "q" * 63,
    "q" * 64,
    "",
    "_jobs",
    ".jobs",
    "-jobs",
    "bad queue",
    "jobs\n",
    "ém",
    "e" * 62 + "é",
    "jobs/eu",
]


async def test_the_database_takes_exactly_the_queue_names_the_client_does(db: AsyncConnection[Any]) -> None:
    """The queue-name CHECK of every table that holds one admits a name exactly when the client's
    pattern does: the cheap form of the rule (an open class and a byte length) is the same rule."""
    for table in ("jobs", "workflow_steps", "schedules", "task_policies"):
        row = await (
            await db.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = %s",
                (f"{table}_queue_format",),
            )
        ).fetchone()
        assert row is not None, table
        rule = row[0].removeprefix("CHECK ").replace("queue", "%(name)s::text")
        for name in QUEUE_NAMES:
            got = await (await db.execute(f"SELECT {rule}", {"name": name})).fetchone()
            assert got is not None
            assert got[0] is (QUEUE_PATTERN.fullmatch(name) is not None), (table, name)


async def test_audit_log_refuses_unknown_events(db: AsyncConnection[Any]) -> None:
    """The audit log accepts only the known event names."""
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        async with db.transaction():
            await db.execute("INSERT INTO tenure.job_events (job_id, event, token) VALUES (1, 'oops', 0)")
    assert info.value.diag.constraint_name == "job_events_event_known"


async def token_of(db: AsyncConnection[Any], queries: Queries, job_id: int) -> tuple[int, int, JobState]:
    job = await queries.job_get(db, job_id)
    assert job is not None
    return job.lease_token, job.attempt_count, job.state


async def test_token_grows_by_one_per_claim_through_a_full_lifecycle(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """Through every transition of a job's life the token rises by one per claim and never falls."""
    job_id = await pending_job(db, queries)
    t0 = await db_now(db)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    trail = []

    async def step() -> None:
        trail.append(await token_of(db, queries, job_id))

    [c] = await queries.job_claim(db, owner="a", now=at(0), **CLAIM)
    await step()
    await queries.job_fail(
        db, job_id=job_id, owner="a", token=c.lease.token, error_code="X", error="x", retry_delay=0, now=at(1)
    )
    await step()
    [c] = await queries.job_claim(db, owner="b", now=at(2), **CLAIM)
    await step()
    assert await queries.lease_release_many(db, owner="b", leases=[(job_id, c.lease.token)], now=at(3)) == [
        job_id
    ]
    await step()
    [c] = await queries.job_claim(db, owner="c", now=at(4), **CLAIM)
    await step()
    recovered = await queries.lease_recover_expired(
        db, limit=10, backoff_base=1, backoff_cap=1, jitter=0, now=at(100)
    )
    assert [r.job_id for r in recovered] == [job_id]
    await step()
    assert (await queries.job_promote_due(db, limit=10, now=at(200))).promoted == 1
    await step()
    [c] = await queries.job_claim(db, owner="d", now=at(200), **CLAIM)
    await step()
    await queries.job_fail(
        db,
        job_id=job_id,
        owner="d",
        token=c.lease.token,
        error_code="P",
        error="p",
        retry_delay=None,
        now=at(201),
    )
    await step()
    retried = await ControlQueries("tenure").retry_many(
        db, [job_id], attempts=2, actor="op", reason="fixed", now=at(202)
    )
    assert [r.id for r in retried.moved] == [job_id]
    await step()
    [c] = await queries.job_claim(db, owner="e", now=at(203), **CLAIM)
    await step()
    assert await queries.job_complete_many(db, owner="e", leases=[(job_id, c.lease.token)], now=at(204)) == {
        (job_id, c.lease.token): "done"
    }
    await step()
    assert [(t, s.value) for t, _, s in trail] == [
        (1, "running"),
        (1, "pending"),
        (2, "running"),
        (2, "pending"),
        (3, "running"),
        (3, "scheduled"),
        (3, "pending"),
        (4, "running"),
        (4, "dead"),
        (4, "pending"),
        (5, "running"),
        (5, "succeeded"),
    ]
    # The released attempt is not counted, so attempts lag the token by exactly that one release.
    assert [a for _, a, _ in trail] == [1, 1, 2, 1, 2, 2, 2, 3, 3, 3, 4, 4]


async def test_token_never_decreases_under_a_random_walk_of_public_queries(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """300 random public-query calls (stale tokens too) never lower a token; only claims and an
    operator's revoke raise it."""
    rng = random.Random(20240611)
    control = ControlQueries("tenure")
    jobs = await queries.job_insert_many(db, [JobSpec(task="t", max_attempts=4) for _ in range(6)])
    ids = [j.id for j in jobs]
    t0 = await db_now(db)
    clock = 0.0
    raised = dict.fromkeys(ids, 0)  # claims and revokes of each job
    held: dict[int, tuple[str, int]] = {}  # job -> (owner, token) of the latest claim we made
    last = {i: 0 for i in ids}
    for _ in range(300):
        clock += rng.choice([0.5, 1, 5, 40])
        now = t0 + timedelta(seconds=clock)
        op = rng.choice(
            ["claim", "complete", "fail", "release", "extend", "recover", "promote", "reprocess", "cancel"]
        )
        target = rng.choice(ids)
        owner, token = held.get(target, ("nobody", 0))
        if rng.random() < 0.2:
            token = max(0, token - 1)  # a stale worker's write
        if op == "claim":
            for c in await queries.job_claim(
                db, owner=f"w{rng.randint(1, 3)}", now=now, **{**CLAIM, "limit": 2}
            ):
                raised[c.id] += 1
                held[c.id] = (c.lease.owner, c.lease.token)
        elif op == "complete":
            await queries.job_complete_many(db, owner=owner, leases=[(target, token)], now=now)
        elif op == "fail":
            delay = rng.choice([None, 0.0, 3.0])
            await queries.job_fail(
                db,
                job_id=target,
                owner=owner,
                token=token,
                error_code="E",
                error="e",
                retry_delay=delay,
                now=now,
            )
        elif op == "release":
            await queries.lease_release_many(db, owner=owner, leases=[(target, token)], now=now)
        elif op == "extend":
            await queries.lease_extend_many(
                db, owner=owner, renewals=[(target, token, {"c": clock}, 30)], now=now
            )
        elif op == "recover":
            await queries.lease_recover_expired(
                db, limit=10, backoff_base=1, backoff_cap=5, jitter=0.5, now=now
            )
        elif op == "promote":
            await queries.job_promote_due(db, limit=10, now=now)
        elif op == "reprocess":
            await control.retry_many(db, [target], attempts=2, actor="op", reason="walk", now=now)
        else:
            cancelled = await control.cancel_many(
                db, [target], max_jobs=1, actor="op", reason="walk", now=now
            )
            raised[target] += sum(r.from_state == "running" for r in cancelled.moved)
        for job_id in ids:
            token_now, attempts, _ = await token_of(db, queries, job_id)
            assert token_now >= last[job_id], (op, job_id)
            assert token_now == raised[job_id], (op, job_id)
            assert attempts <= token_now
            last[job_id] = token_now
    assert sum(raised.values()) > 20  # the walk really exercised the claim path


UNREADABLE_VALUES = [
    ("available_at", "'infinity'", "jobs_times_in_range"),
    ("available_at", "'-infinity'", "jobs_times_in_range"),
    ("available_at", "'10000-01-01'", "jobs_times_in_range"),
    ("created_at", "'infinity'", "jobs_times_in_range"),
    ("created_at", "'0500-01-01'", "jobs_times_in_range"),
    ("max_attempts", "1001", "jobs_attempts_bounded"),
]


@pytest.mark.parametrize(("column", "value", "constraint"), UNREADABLE_VALUES)
async def test_a_value_no_worker_can_read_or_run_is_refused(
    db: AsyncConnection[Any], column: str, value: str, constraint: str
) -> None:
    """A raw insert of a run or creation time outside 1900-9000, or a budget over 1000, is refused."""
    for state in ("pending", "scheduled"):
        with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
            async with db.transaction():
                await db.execute(
                    f"INSERT INTO tenure.jobs (queue, task, state, {column})"
                    f" VALUES ('q', 't', '{state}', {value})"
                )


async def test_a_job_may_not_hold_another_tasks_unique_key(db: AsyncConnection[Any]) -> None:
    """A job's unique key must start with its own task's name: no job can squat another task's key."""
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_unique_key_of_its_task"):
        async with db.transaction():
            await db.execute(
                "INSERT INTO tenure.jobs (queue, task, unique_key, unique_states) VALUES"
                " ('q', 'noop.never', 'billing.refund:{\"order\":1}', '{scheduled,pending,running,dead}')"
            )

"""Least-privilege roles, with real PostgreSQL roles: what each may do and what it is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, errors

from tenure.cli import main
from tenure.client import Client
from tenure.db.queries import Queries
from tenure.jobs import JobSpec
from tenure.security.roles import Role, grants

SCHEMA = "tenure"


def as_role(dsn: str, role: str, password: str | None = None) -> str:
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    if password:
        params["password"] = password
    return conninfo.make_conninfo(**params)


@pytest.fixture
def roles(dsn: str) -> Iterator[dict[Role, str]]:
    """Three fresh LOGIN roles with Tenure's GRANTs on this test's database; dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = {role: f"tenure_{role.value}_{tag}" for role in Role}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role, name in names.items():
            conn.execute(f'CREATE ROLE "{name}" LOGIN')
            conn.execute(grants(role, name, SCHEMA))
    yield names
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names.values():
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')


async def _enqueue(dsn: str, n: int = 1, max_attempts: int = 3) -> list[int]:
    async with Client(dsn, schema=SCHEMA) as client:
        specs = [JobSpec(task="sec.task", queue="sec", max_attempts=max_attempts) for _ in range(n)]
        return [j.id for j in await client.enqueue_many(specs)]


async def _claim(
    conn: psycopg.AsyncConnection[Any], owner: str, limit: int = 1, now: Any = None
) -> list[Any]:
    return await Queries(SCHEMA).job_claim(
        conn,
        queue="sec",
        owner=owner,
        limit=limit,
        default_lease_seconds=30,
        default_runtime_seconds=60,
        now=now,
    )


def _row(dsn: str, job_id: int) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT * FROM {SCHEMA}.jobs WHERE id = %s", [job_id]).fetchone()
        assert row is not None
        return tuple(row)


async def test_producer_enqueues_but_cannot_claim_complete_or_read_payloads(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The producer role enqueues (INSERT and COPY) and nothing else: no claim, no completion."""
    producer = as_role(dsn, roles[Role.PRODUCER])
    [job_id] = await _enqueue(producer)
    async with Client(producer, schema=SCHEMA) as client:
        assert await client.enqueue_copy([JobSpec(task="sec.task", queue="sec")]) == 1
    before = _row(dsn, job_id)
    async with await psycopg.AsyncConnection.connect(producer, autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            await _claim(conn, "intruder")
        with pytest.raises(errors.InsufficientPrivilege):
            await Queries(SCHEMA).job_complete_many(conn, owner="intruder", leases=[(job_id, 0)])
        with pytest.raises(errors.InsufficientPrivilege):
            await conn.execute(f"SELECT payload FROM {SCHEMA}.jobs")
    assert _row(dsn, job_id) == before


async def test_worker_runs_the_whole_lease_cycle_under_its_grants(dsn: str, roles: dict[Role, str]) -> None:
    """Claim, heartbeat, fail with retry, recover, complete: the worker role needs nothing more."""
    await _enqueue(dsn, 2)
    q = Queries(SCHEMA)
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.WORKER]), autocommit=True
    ) as conn:
        first, second = await _claim(conn, "w1", limit=2)
        assert await q.lease_extend_many(
            conn, owner="w1", renewals=[(first.id, first.lease.token, {"n": 1}, 30)]
        )
        failed = await q.job_fail(
            conn,
            job_id=first.id,
            owner="w1",
            token=first.lease.token,
            error_code="X",
            error="x",
            retry_delay=0,
        )
        assert failed.outcome == "failed"
        later = second.db_now + timedelta(seconds=120)
        recovered = await q.lease_recover_expired(
            conn, limit=10, backoff_base=0, backoff_cap=0, jitter=0, now=later
        )
        assert [r.job_id for r in recovered] == [second.id]
        again = await _claim(conn, "w2", limit=2, now=later)
        leases = [(j.id, j.lease.token) for j in again]
        done = await q.job_complete_many(conn, owner="w2", leases=leases, now=later)
        assert done == {lease: "done" for lease in leases} and len(done) == 2


async def test_worker_cannot_change_a_job_it_does_not_hold(dsn: str, roles: dict[Role, str]) -> None:
    """Through Tenure's queries another worker's job is untouchable (the fence), and the worker role
    can never rewrite payloads or budgets, insert, delete, create tables or read other tables."""
    [job_id] = await _enqueue(dsn)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE public.billing (id int)")
    q = Queries(SCHEMA)
    worker = as_role(dsn, roles[Role.WORKER])
    async with await psycopg.AsyncConnection.connect(worker, autocommit=True) as conn:
        [held] = await _claim(conn, "holder")
        before = _row(dsn, job_id)
        token = held.lease.token
        assert await q.job_complete_many(conn, owner="thief", leases=[(job_id, token)]) == {
            (job_id, token): "lost"
        }
        stolen = await q.job_fail(
            conn, job_id=job_id, owner="thief", token=token, error_code="X", error="x", retry_delay=None
        )
        assert stolen.outcome == "lost"
        assert await q.lease_extend_many(conn, owner="thief", renewals=[(job_id, token, {"n": 1}, 30)]) == []
        assert _row(dsn, job_id) == before
        for statement in (
            f"UPDATE {SCHEMA}.jobs SET payload = '{{\"x\": 1}}' WHERE id = {job_id}",
            f"UPDATE {SCHEMA}.jobs SET max_attempts = 99 WHERE id = {job_id}",
            f"DELETE FROM {SCHEMA}.jobs WHERE id = {job_id}",
            f"INSERT INTO {SCHEMA}.jobs (queue, task) VALUES ('sec', 'forged')",
            f"TRUNCATE {SCHEMA}.job_events",
            f"CREATE TABLE {SCHEMA}.stash (id int)",
            "SELECT * FROM public.billing",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                await conn.execute(statement)
        assert _row(dsn, job_id) == before


async def test_privileges_alone_do_not_fence_raw_sql_between_workers(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The documented boundary: a worker role CAN rewrite another job's lease columns with raw SQL;
    only Tenure's fenced statements stop that (docs/security.md). This test fails if that changes."""
    [job_id] = await _enqueue(dsn)
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.WORKER]), autocommit=True
    ) as conn:
        await _claim(conn, "holder")
        cur = await conn.execute(
            f"UPDATE {SCHEMA}.jobs SET lease_owner = 'thief' WHERE id = %s AND state = 'running'", [job_id]
        )
        assert cur.rowcount == 1


async def test_admin_reprocesses_dead_jobs_that_producer_and_worker_cannot(
    dsn: str, roles: dict[Role, str]
) -> None:
    """Dead-job operations belong to the admin role alone."""
    [job_id] = await _enqueue(dsn, max_attempts=1)
    q = Queries(SCHEMA)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [held] = await _claim(conn, "w")
        await q.job_fail(
            conn,
            job_id=job_id,
            owner="w",
            token=held.lease.token,
            error_code="X",
            error="x",
            retry_delay=None,
        )
    for role in (Role.PRODUCER, Role.WORKER):
        async with await psycopg.AsyncConnection.connect(as_role(dsn, roles[role]), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                await q.job_reprocess(conn, job_id, attempts=1, actor=role.value, reason="try")
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.ADMIN]), autocommit=True
    ) as conn:
        assert [r["id"] for r in await q.dead_list(conn)] == [job_id]
        assert await q.job_reprocess(conn, job_id, attempts=1, actor="admin", reason="fixed")
        assert await q.job_cancel(conn, job_id, actor="admin", reason="not needed")


def test_roles_command_prints_grants_for_the_chosen_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`tenure roles --schema billing` prints each role's GRANTs on that schema, nothing else."""
    assert main(["roles", "--schema", "billing", "--worker", "jobs_worker"]) == 0
    printed = capsys.readouterr().out
    assert 'GRANT USAGE ON SCHEMA "billing" TO "jobs_worker";' in printed
    assert 'GRANT INSERT ON "billing".jobs TO "tenure_producer";' in printed
    assert '"tenure"' not in printed

"""Least-privilege roles, with real PostgreSQL roles: what each may do and what it is refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from _roles import SCHEMA, as_role
from psycopg import errors

from tenure.db.control_queries import ControlQueries
from tenure.db.ops_queries import OpsQueries
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec, JobState
from tenure.ops.cli import main
from tenure.producer.client import Client
from tenure.producer.workflow import Workflow
from tenure.security.roles import Role, grants


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
    can never rewrite payloads or budgets, insert a job with a lease, delete, create tables or read
    other tables."""
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
            f"INSERT INTO {SCHEMA}.jobs (queue, task, lease_owner) VALUES ('sec', 'forged', 'thief')",
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
    ops, control = OpsQueries(SCHEMA), ControlQueries(SCHEMA)
    for role in (Role.PRODUCER, Role.WORKER):
        async with await psycopg.AsyncConnection.connect(as_role(dsn, roles[role]), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                await ops.dead_reprocess_many(conn, ids=[job_id], attempts=1, actor=role.value, reason="try")
            with pytest.raises(errors.InsufficientPrivilege):
                await control.retry_many(conn, [job_id], attempts=1, actor=role.value, reason="try")
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.ADMIN]), autocommit=True
    ) as conn:
        assert [r.id for r in await ops.dead_search(conn)] == [job_id]
        assert await ops.dead_reprocess_many(
            conn, ids=[job_id], attempts=1, actor="admin", reason="fixed"
        ) == [job_id]
        cancelled = await control.cancel_many(conn, [job_id], max_jobs=1, actor="admin", reason="not needed")
        assert [r.id for r in cancelled.moved] == [job_id]


def test_roles_command_prints_grants_for_the_chosen_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`tenure roles --schema billing` prints each role's GRANTs on that schema, nothing else."""
    assert main(["roles", "--schema", "billing", "--worker", "jobs_worker"]) == 0
    printed = capsys.readouterr().out
    assert 'GRANT USAGE ON SCHEMA "billing" TO "jobs_worker";' in printed
    assert 'REVOKE ALL ON ALL TABLES IN SCHEMA "billing" FROM "tenure_producer";' in printed
    assert 'REVOKE ALL ON ALL FUNCTIONS IN SCHEMA "billing" FROM "tenure_producer";' in printed
    assert 'GRANT EXECUTE ON FUNCTION "billing".enqueue(' in printed
    assert 'ON "billing".jobs TO "tenure_producer"' not in printed
    assert '"tenure"' not in printed


# -- the producer cannot forge jobs, squat keys or read their keys -----------------------------

FORGED_INSERTS = [
    ("state", "'running'"),
    ("state", "'succeeded'"),
    ("lease_token", "7"),
    ("lease_owner", "'worker-b'"),
    ("finished_at", "now()"),
    ("unique_key", "'billing.refund:k'"),
    ("available_at", "'8999-01-01'"),
]


async def test_producer_may_not_write_jobs_itself_only_through_enqueue(
    dsn: str, roles: dict[Role, str]
) -> None:
    """Every raw INSERT, UPDATE or DELETE on jobs by the producer role is refused, whatever its
    columns, as are the key look-up functions; nothing is written."""
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.PRODUCER]), autocommit=True
    ) as conn:
        await conn.execute("SET lock_timeout = '5s'")
        for statement in (
            f"INSERT INTO {SCHEMA}.jobs (queue, task) VALUES ('sec', 't')",
            *(
                f"INSERT INTO {SCHEMA}.jobs (queue, task, {column}) VALUES ('sec', 't', {value})"
                for column, value in FORGED_INSERTS
            ),
            f"INSERT INTO {SCHEMA}.jobs (id, queue, task) OVERRIDING SYSTEM VALUE VALUES (4242, 'sec', 't')",
            f"UPDATE {SCHEMA}.jobs SET state = 'succeeded'",
            f"DELETE FROM {SCHEMA}.jobs",
            f"INSERT INTO {SCHEMA}.job_events (job_id, event, token) VALUES (1, 'retry', 1)",
            f"SELECT * FROM {SCHEMA}.job_holding_unique_key('billing.refund:k')",
            f"SELECT * FROM {SCHEMA}.job_by_idempotency_key(gen_random_uuid())",
            f"INSERT INTO {SCHEMA}.task_policies (task, queue, priority, max_attempts, declared_by)"
            " VALUES ('t', 'q', 0, 1, 'x')",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                await conn.execute(statement)
    with psycopg.connect(dsn) as admin:
        assert admin.execute(f"SELECT count(*) FROM {SCHEMA}.jobs").fetchone() == (0,)


async def test_every_job_the_producer_enqueues_is_an_unclaimed_waiting_job_of_its_task(
    dsn: str, roles: dict[Role, str]
) -> None:
    """Through enqueue() with every argument set, the producer's job is pending (or scheduled),
    unclaimed, token 0, no owner, its unique key scoped to its own task; out-of-bounds arguments
    are refused with the fix named, and nothing is written for them."""
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.PRODUCER]), autocommit=True
    ) as conn:
        await conn.execute(
            f"SELECT * FROM {SCHEMA}.enqueue('noop.never', '{{\"a\": 1}}', queue => 'sec', priority => 5,"
            " max_attempts => 1, ordering_key => 'k', unique_key => 'billing.refund:k',"
            " unique_states => '{scheduled,pending,running}')"
        )
        await conn.execute(f"SELECT * FROM {SCHEMA}.enqueue('t', delay_seconds => 3600)")
        for call, message in (
            ("max_attempts => 0", "max_attempts 0 is invalid"),
            ("max_attempts => 5000", "max_attempts 5000 is invalid"),
            ("run_at => 'infinity'", "run_at infinity is out of range"),
            ("run_at => '-infinity'", "out of range"),
            ("priority => 40000", "priority 40000 is out of range"),
            ("payload => '[1]'", "payload must be a JSON object"),
            ("queue => 'bad queue'", "queue name 'bad queue' is invalid"),
            ("unique_key => 'k', unique_states => '{scheduled,pending,running,dead}'", "beyond the scope"),
            (
                "unique_key => 'k', unique_states => '{scheduled,pending,running,cancelled}'",
                "may not include",
            ),
            ("unique_states => '{pending}'", "go with a unique key"),
        ):
            with pytest.raises(errors.DatabaseError, match=message):
                await conn.execute(f"SELECT * FROM {SCHEMA}.enqueue('t', {call})")
    with psycopg.connect(dsn) as admin:
        rows = admin.execute(
            f"SELECT state::text, lease_token, attempt_count, lease_owner, lease_expires_at, finished_at,"
            f" unique_key FROM {SCHEMA}.jobs ORDER BY id"
        ).fetchall()
    assert rows == [
        ("pending", 0, 0, None, None, None, "noop.never:billing.refund:k"),
        ("scheduled", 0, 0, None, None, None, None),
    ]


async def test_a_producer_cannot_squat_another_tasks_unique_key(dsn: str, roles: dict[Role, str]) -> None:
    """A producer's job of task noop.never given billing.refund's key holds a key of its own task;
    billing.refund's real enqueue stores its job, and a second one meets the first."""
    async with Client(as_role(dsn, roles[Role.PRODUCER]), schema=SCHEMA) as client:
        await client.enqueue_many([JobSpec(task="noop.never", queue="sec", unique="billing.refund:order-1")])
        await client.enqueue_many([JobSpec(task="noop.never", queue="sec", unique="order-1")])
        real = await client.enqueue_many([JobSpec(task="billing.refund", queue="sec", unique="order-1")])
        again = await client.enqueue_many([JobSpec(task="billing.refund", queue="sec", unique="order-1")])
    assert not real[0].existing
    assert again[0].existing and again[0].id == real[0].id


async def test_producer_reads_no_job_and_learns_only_of_the_jobs_it_enqueues(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The producer role cannot SELECT jobs at all: its only answers are enqueue()'s, for the job
    it asked to enqueue (the new one, or the one holding its key)."""
    await _enqueue(dsn, 2)
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.PRODUCER]), autocommit=True
    ) as conn:
        for statement in (
            f"SELECT idempotency_key FROM {SCHEMA}.jobs",
            f"SELECT id, available_at FROM {SCHEMA}.jobs",
            f"SELECT last_error, payload FROM {SCHEMA}.jobs",
            f"SELECT * FROM {SCHEMA}.task_policies",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                await conn.execute(statement)


async def test_producer_enqueues_with_keys_it_made_and_cannot_reuse_one(
    dsn: str, roles: dict[Role, str]
) -> None:
    """Through the client the producer enqueues (one by one, in batches, and COPY, which becomes
    enqueue() calls for it); each returned key is the stored one, and a second job with a key
    already taken comes back as the first."""
    producer = as_role(dsn, roles[Role.PRODUCER])
    async with Client(producer, schema=SCHEMA) as client:
        specs = [JobSpec(task="sec.task", queue="sec", payload={"n": n}) for n in range(40)]
        enqueued = await client.enqueue_many(specs)
        assert await client.enqueue_copy(specs[:5]) == 5
        keyed = await client.enqueue_many([JobSpec(task="sec.task", queue="sec", idempotency_key="k-1")])
        again = await client.enqueue_many([JobSpec(task="sec.task", queue="sec", idempotency_key="k-1")])
    with psycopg.connect(dsn) as admin:
        stored = admin.execute(
            f"SELECT id, idempotency_key, payload FROM {SCHEMA}.jobs ORDER BY id"
        ).fetchall()
    assert [j.id for j in enqueued] == [i for i, _, _ in stored[:40]]
    assert [p for _, _, p in stored[:40]] == [{"n": n} for n in range(40)]
    assert len({k for _, k, _ in stored}) == 46
    assert keyed[0].idempotency_key == stored[-1][1] and not keyed[0].existing
    assert again[0].existing and again[0].id == keyed[0].id


async def test_applying_the_grants_again_tightens_an_older_broad_grant(
    dsn: str, roles: dict[Role, str]
) -> None:
    """A producer granted INSERT on every column and SELECT of keys (older GRANTs) loses both
    when today's `tenure roles` output is applied."""
    name = roles[Role.PRODUCER]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'GRANT INSERT ON {SCHEMA}.jobs TO "{name}"')
        admin.execute(f'GRANT SELECT (id, queue, idempotency_key, available_at) ON {SCHEMA}.jobs TO "{name}"')
    forge = (
        f"INSERT INTO {SCHEMA}.jobs (queue, task, state, finished_at) VALUES ('sec', 't', 'succeeded', now())"
    )
    async with await psycopg.AsyncConnection.connect(as_role(dsn, name), autocommit=True) as conn:
        await conn.execute(forge)  # the old grant allowed it
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(grants(Role.PRODUCER, name, SCHEMA))
    async with await psycopg.AsyncConnection.connect(as_role(dsn, name), autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            await conn.execute(forge)
        with pytest.raises(errors.InsufficientPrivilege):
            await conn.execute(f"SELECT idempotency_key FROM {SCHEMA}.jobs")


async def test_only_the_admin_may_cancel_or_pause_and_the_worker_may_snooze_and_store_results(
    dsn: str, roles: dict[Role, str]
) -> None:
    """Job control by role: the worker and producer roles may neither cancel (the trigger) nor
    pause; the worker role honours a pause, snoozes and stores results for jobs it holds; the
    producer may ask for a result; the admin cancels and pauses."""
    control, q = ControlQueries(SCHEMA), Queries(SCHEMA)
    producer, worker, admin = (as_role(dsn, roles[r]) for r in (Role.PRODUCER, Role.WORKER, Role.ADMIN))
    async with Client(producer, schema=SCHEMA) as client:
        [waited] = await client.enqueue_many([JobSpec(task="sec.task", queue="sec", result_wanted=True)])
    [snoozy, target] = await _enqueue(dsn, 2)
    for who in (producer, worker):
        async with await psycopg.AsyncConnection.connect(who, autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                await control.cancel_many(conn, [target], max_jobs=1, actor="x", reason="try")
            with pytest.raises(errors.InsufficientPrivilege):
                await control.pause(conn, "sec", until=None, actor="x", reason="try")
    async with await psycopg.AsyncConnection.connect(worker, autocommit=True) as conn:
        held = {j.id: j for j in await _claim(conn, "w", limit=3)}
        assert set(held) == {waited.id, snoozy, target}
        done = await q.job_complete_many(
            conn,
            owner="w",
            leases=[(waited.id, held[waited.id].lease.token)],
            results={(waited.id, held[waited.id].lease.token): {"answer": 42}},
        )
        assert done == {(waited.id, held[waited.id].lease.token): "done"}
        snoozed = await q.job_snooze(
            conn, job_id=snoozy, owner="w", token=held[snoozy].lease.token, delay=0, max_snoozes=5
        )
        assert (snoozed.outcome, snoozed.state) == ("snoozed", JobState.PENDING)
        with pytest.raises(
            errors.InsufficientPrivilege
        ):  # a running job is not the worker's to cancel either
            await control.cancel_many(conn, [target], max_jobs=1, actor="w", reason="try")
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        assert (await control.result(conn, waited.id)).result == {"answer": 42}
        assert (await control.pause(conn, "sec", until=None, actor="admin", reason="hold")).known
        moved = await control.cancel_many(conn, [target], max_jobs=1, actor="admin", reason="stop")
        assert [(r.id, r.from_state) for r in moved.moved] == [(target, "running")]
    async with await psycopg.AsyncConnection.connect(worker, autocommit=True) as conn:
        assert await _claim(conn, "w") == [], "the worker role claimed from a paused queue"


async def test_a_producer_enqueues_a_workflow_and_a_worker_moves_it_on_without_table_grants(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The producer enqueues a workflow through enqueue_workflow() alone; the worker's fenced
    completion of the first step releases the second (the trigger needs no grant of the role);
    neither role may write the workflow tables itself."""
    wf = Workflow("sec")
    first = wf.step(_task("sec.a"))
    wf.step(_task("sec.b"), after=first)
    async with Client(as_role(dsn, roles[Role.PRODUCER]), schema=SCHEMA) as client:
        run = await client.enqueue_workflow(wf)
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.WORKER]), autocommit=True
    ) as conn:
        (claimed,) = await _claim(conn, "w1")
        assert claimed.id == run.jobs["sec.a"]
        done = await Queries(SCHEMA).job_complete_many(
            conn, owner="w1", leases=[(claimed.id, claimed.lease.token)]
        )
        assert set(done.values()) == {"done"}
        (released,) = await _claim(conn, "w1")
        assert released.id == run.jobs["sec.b"]
        for role in (Role.PRODUCER, Role.WORKER):
            with pytest.raises(errors.InsufficientPrivilege):
                async with await psycopg.AsyncConnection.connect(as_role(dsn, roles[role])) as other:
                    await other.execute(f"UPDATE {SCHEMA}.workflow_steps SET remaining = 0")


def _task(name: str) -> Any:
    """A task of the workflow above, known to the client only by name (its queue given)."""
    from tenure.tasks import TaskRegistry

    async def handler(ctx: Any) -> None:
        return None

    return TaskRegistry().register(handler, name=name, queue="sec")


async def test_a_producer_signals_a_waiting_job_and_can_neither_read_the_mailbox_nor_end_a_wait(
    dsn: str, roles: dict[Role, str]
) -> None:
    """A worker's job waits under the worker role's grants; the producer's signal() wakes it and the
    worker's next run reads the signal from its wait. The producer may not read the mailbox or the
    waits, end a wait by writing it, nor call the functions that deliver and sweep."""
    from tenure.db.wait_queries import WaitQueries

    producer = as_role(dsn, roles[Role.PRODUCER])
    [job_id] = await _enqueue(producer)
    waits = WaitQueries(SCHEMA)
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.WORKER]), autocommit=True
    ) as worker:
        (claimed,) = await _claim(worker, "w1")
        step = await waits.job_wait(
            worker, job_id=job_id, owner="w1", token=claimed.lease.token, name="ok", key="sec:ok", timeout=60
        )
        assert step.outcome == "waiting"
        async with Client(producer, schema=SCHEMA) as client:
            sent = await client.signal("sec:ok", {"fine": True})
        assert (sent.outcome, sent.job_id) == ("delivered", job_id)
        (again,) = await _claim(worker, "w1")
        step = await waits.job_wait(
            worker, job_id=job_id, owner="w1", token=again.lease.token, name="ok", key="sec:ok", timeout=60
        )
        assert (step.outcome, step.state, step.payload) == ("resolved", "signalled", {"fine": True})
        swept = await waits.sweep(worker, batch=10)
        assert swept.delivered == 0
    for statement in (
        f"SELECT payload FROM {SCHEMA}.signals",
        f"SELECT key FROM {SCHEMA}.job_waits",
        f"UPDATE {SCHEMA}.job_waits SET state = 'ended', resolved_at = now()",
        f"SELECT {SCHEMA}.signals_sweep(10)",
        f"SELECT {SCHEMA}.signal_deliver(1, now())",
    ):
        with pytest.raises(errors.InsufficientPrivilege):
            async with await psycopg.AsyncConnection.connect(producer) as conn:
                await conn.execute(statement)


async def test_a_failing_signal_sweep_costs_the_recovery_pass_nothing(
    dsn: str, roles: dict[Role, str], caplog: pytest.LogCaptureFixture
) -> None:
    """With the sweep refused (its grant taken back), a worker's recovery pass still recovers an
    expired lease; the sweep's failure is logged and counted on a health of its own, which is not
    critical, so it never stops the worker."""
    from datetime import UTC, datetime

    from tenure.lab.passes import worker_passes

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            f'REVOKE EXECUTE ON FUNCTION {SCHEMA}.signals_sweep(integer) FROM "{roles[Role.WORKER]}"'
        )
    worker = as_role(dsn, roles[Role.WORKER])
    [job_id] = await _enqueue(as_role(dsn, roles[Role.PRODUCER]))
    async with await psycopg.AsyncConnection.connect(worker, autocommit=True) as conn:
        await _claim(conn, "w1")
    async with worker_passes(worker, SCHEMA, name="sweep-refused") as passes:
        recovered = await passes.recovery.run_once(now=datetime.now(UTC) + timedelta(hours=1))
        health = passes.recovery.sweep_health
    assert [r.job_id for r in recovered] == [job_id]
    assert (health.consecutive_failures, health.critical) == (1, False)
    assert "signal sweep failed" in caplog.text and "InsufficientPrivilege" in caplog.text


async def test_failing_wait_deadlines_hold_back_no_scheduled_job(
    dsn: str, roles: dict[Role, str], caplog: pytest.LogCaptureFixture
) -> None:
    """With the waits refused to the worker (its grant on them taken back), the promotion pass
    still makes a due scheduled job pending; ending waits at their deadline fails apart, logged
    and counted on a health of its own, not critical."""
    from datetime import UTC, datetime

    from tenure.lab.passes import worker_passes

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'REVOKE ALL ON {SCHEMA}.job_waits FROM "{roles[Role.WORKER]}"')
    async with Client(as_role(dsn, roles[Role.PRODUCER]), schema=SCHEMA) as client:
        later = await client.enqueue_many([JobSpec(task="sec.task", queue="sec", delay=60)])
    worker = as_role(dsn, roles[Role.WORKER])
    async with worker_passes(worker, SCHEMA, name="deadlines-refused") as passes:
        promoted = await passes.promoter.run_once(now=datetime.now(UTC) + timedelta(hours=1))
        health = passes.promoter.deadline_health
    assert promoted.promoted == 1 and _row(dsn, later[0].id)[4] == "pending"
    assert (health.consecutive_failures, health.critical) == (1, False)
    assert "ending waits at their deadline failed" in caplog.text


async def test_a_producers_step_condition_is_kept_by_the_worker_roles_passes(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The producer declares a step whose deadline cancels it; the worker role, which may not
    cancel a job itself, ends it at its deadline through the promotion pass (the one function it
    is granted for that), and the step after it is cancelled too. Nor may the worker role call the
    function that wakes a wait as it pleases."""
    from datetime import UTC, datetime

    from tenure import Elapsed, Signalled
    from tenure.lab.passes import worker_passes

    wf = Workflow("sec")
    gated = wf.step(_task("sec.a"), wait_for=Signalled("sec:go"), cancel_if=Elapsed(60))
    wf.step(_task("sec.b"), after=gated)
    async with Client(as_role(dsn, roles[Role.PRODUCER]), schema=SCHEMA) as client:
        run = await client.enqueue_workflow(wf)
    worker = as_role(dsn, roles[Role.WORKER])
    async with worker_passes(worker, SCHEMA, name="conditions") as passes:
        ended = await passes.promoter.run_once(now=datetime.now(UTC) + timedelta(minutes=5))
        assert ended.waits_timed_out == 1 and passes.promoter.deadline_health.consecutive_failures == 0
    assert _row(dsn, run.jobs["sec.a"])[4] == "cancelled"
    with psycopg.connect(dsn) as conn:
        states = conn.execute(
            f"SELECT name, state FROM {SCHEMA}.workflow_steps WHERE workflow_id = %s ORDER BY name", [run.id]
        ).fetchall()
    assert states == [("sec.a", "cancelled"), ("sec.b", "cancelled")]
    with pytest.raises(errors.InsufficientPrivilege):
        async with await psycopg.AsyncConnection.connect(worker) as conn:
            await conn.execute(f"SELECT {SCHEMA}.wait_wake(1, '@step', 'timed_out', now())")


async def test_a_worker_publishes_under_its_fence_and_a_producer_reads_no_published_value(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The worker role publishes for the job it holds (its own grants suffice); the producer role
    may neither read the published values nor write one."""
    from tenure.db.published_queries import PublishedQueries

    [job_id] = await _enqueue(as_role(dsn, roles[Role.PRODUCER]))
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.WORKER]), autocommit=True
    ) as conn:
        (claimed,) = await _claim(conn, "w1")
        published = await PublishedQueries(SCHEMA).publish(
            conn, job_id=job_id, owner="w1", token=claimed.lease.token, key="k", value_json='{"ok": 1}'
        )
        assert published == "published"
    for statement in (
        f"SELECT value FROM {SCHEMA}.published_values",
        f"INSERT INTO {SCHEMA}.published_values (job_id, key, value, published_at, by_job, token) "
        f"VALUES ({job_id}, 'k', '1', now(), {job_id}, 1)",
    ):
        with pytest.raises(errors.InsufficientPrivilege):
            async with await psycopg.AsyncConnection.connect(as_role(dsn, roles[Role.PRODUCER])) as conn:
                await conn.execute(statement)

"""What a role can do through Tenure's SQL functions is bounded as docs/security.md says: no
function runs with a path a caller chose, no producer holds a real task's key against its job,
and enqueue() and enqueue_workflow() take overrides only within the Python client's bounds."""

from __future__ import annotations

import itertools
import json
from typing import Any

import psycopg
import pytest
from _roles import SCHEMA, as_role
from psycopg import errors

from tenure.db.control_queries import ControlQueries
from tenure.db.migrate import migrate
from tenure.model.jobs import JobSpec
from tenure.producer.client import Client
from tenure.security.roles import Role

ALL_STATES = "{scheduled,pending,running,succeeded,dead,cancelled}"


def _one(dsn: str, query: str, params: Any = None) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        assert row is not None
        return row[0] if len(row) == 1 else tuple(row)


def _declare_refund(dsn: str, states: str = "{scheduled,pending,running}") -> None:
    """billing.refund as its worker declares it: queue billing, unique by order_id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {SCHEMA}.task_policies (task, queue, priority, max_attempts, unique_fields,"
            " unique_states, declared_by) VALUES ('billing.refund', 'billing', 0, 5, '{order_id}', %s, 'w')",
            [states],
        )


# -- functions run with the path they were written for ------------------------------------------


def test_every_definer_and_trigger_function_pins_its_search_path(dsn: str) -> None:
    """Every SECURITY DEFINER or trigger function of Tenure's schema runs with
    search_path = pg_catalog, pg_temp, whatever the caller's path: none can be shadowed."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.prosecdef, p.prorettype = 'trigger'::regtype, coalesce(p.proconfig, '{}')"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s",
            [SCHEMA],
        ).fetchall()
    guarded = {name: config for name, definer, trigger, config in rows if definer or trigger}
    assert {"enqueue", "enqueue_workflow", "jobs_cancel_guard", "workflow_advance"} <= set(guarded)
    unpinned = {n: c for n, c in guarded.items() if "search_path=pg_catalog, pg_temp" not in c}
    assert unpinned == {}


async def test_a_worker_that_may_create_functions_cannot_shadow_the_cancel_guard(
    dsn: str, roles: dict[Role, str]
) -> None:
    """A worker role that may CREATE in a schema on its path defines its own has_table_privilege
    and puts it first: the cancel guard still refuses it the cancel, and the job stays pending."""
    worker = roles[Role.WORKER]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'GRANT CREATE ON SCHEMA public TO "{worker}"')
    async with Client(dsn, schema=SCHEMA) as client:
        job = await client.enqueue("sec.task", queue="sec")
    with psycopg.connect(as_role(dsn, worker), autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION public.has_table_privilege(text, text) RETURNS boolean"
            " LANGUAGE sql AS 'SELECT true'"
        )
        conn.execute("SET search_path = public, pg_catalog")
        with pytest.raises(errors.InsufficientPrivilege, match="may not cancel jobs"):
            conn.execute(
                f"UPDATE {SCHEMA}.jobs SET state = 'cancelled', finished_at = now() WHERE id = %s", [job.id]
            )
    assert _one(dsn, f"SELECT state::text FROM {SCHEMA}.jobs WHERE id = %s", [job.id]) == "pending"


# -- a producer cannot hold a real task's key against its job -----------------------------------


def _squat(order: int, states: str | None = None) -> str:
    """The squatting call: billing.refund's key for `order`, parked on a queue no worker serves
    until 8999, holding it in `states` when given."""
    scope = "" if states is None else f", unique_states => '{states}'"
    return (
        f"SELECT * FROM {SCHEMA}.enqueue('billing.refund', '{{}}', queue => 'parking',"
        f" run_at => '8999-01-01', unique_key => '{{\"order_id\":{order}}}'{scope})"
    )


def _real(order: int) -> str:
    """The real enqueue of a refund of `order`, its key drawn from the payload by the policy."""
    return f"SELECT id, existing FROM {SCHEMA}.enqueue('billing.refund', '{{\"order_id\": {order}}}')"


async def test_a_producer_cannot_squat_a_real_tasks_key_beyond_its_scope(
    dsn: str, roles: dict[Role, str]
) -> None:
    """The squatting call (every state in its scope, parked on a queue no worker serves, due in
    8999) is refused and writes nothing; the real enqueue of order 42 then stores its job."""
    _declare_refund(dsn)
    with psycopg.connect(as_role(dsn, roles[Role.PRODUCER]), autocommit=True) as conn:
        with pytest.raises(errors.InvalidParameterValue, match="cancelled job never holds") as refused:
            conn.execute(_squat(42, ALL_STATES))
        assert refused.value.diag.message_hint
        wider = "{scheduled,pending,running,dead}"
        with pytest.raises(errors.InvalidParameterValue, match="beyond the scope task") as refused:
            conn.execute(_squat(42, wider))
        assert refused.value.diag.message_hint
        assert _one(dsn, f"SELECT count(*) FROM {SCHEMA}.jobs") == 0
        real_id, existing = conn.execute(_real(42)).fetchone() or (None, None)
    assert existing is False
    assert _one(dsn, f"SELECT queue, unique_states::text FROM {SCHEMA}.jobs WHERE id = %s", [real_id]) == (
        "billing",
        "{scheduled,pending,running}",
    )


async def test_an_admins_cancel_frees_a_key_a_parked_job_holds(dsn: str, roles: dict[Role, str]) -> None:
    """A producer's job within the task's scope, parked until 8999, holds order 43's key; the
    admin's cancel frees it, and the real enqueue then stores its job."""
    _declare_refund(dsn, "{scheduled,pending,running,dead,succeeded}")
    producer = as_role(dsn, roles[Role.PRODUCER])
    with psycopg.connect(producer, autocommit=True) as conn:
        squat_id = conn.execute(_squat(43)).fetchone()[0]  # type: ignore[index]
        held_id, existing = conn.execute(_real(43)).fetchone() or (None, None)
        assert (held_id, existing) == (squat_id, True)
    async with await psycopg.AsyncConnection.connect(
        as_role(dsn, roles[Role.ADMIN]), autocommit=True
    ) as admin:
        cancelled = await ControlQueries(SCHEMA).cancel_many(
            admin, [squat_id], max_jobs=1, actor="admin", reason="parked"
        )
        assert [r.id for r in cancelled.moved] == [squat_id]
    with psycopg.connect(producer, autocommit=True) as conn:
        real_id, existing = conn.execute(_real(43)).fetchone() or (None, None)
    assert existing is False and real_id != squat_id


# -- enqueue() and enqueue_workflow() take overrides within the client's bounds ------------------

OUT_OF_BOUNDS = [
    ("payload", 5 * 1024 * 1024, r"payload of task 'sec.task' is \d+ bytes, over the limit of 1048576"),
    ("priority", 32768, "priority 32768 is out of range"),
    ("max_attempts", 1001, "max_attempts 1001 is invalid"),
    ("max_attempts", 0, "max_attempts 0 is invalid"),
    ("queue", "bad queue", "queue name 'bad queue' is invalid"),
]


@pytest.mark.parametrize(("option", "value", "message"), OUT_OF_BOUNDS, ids=lambda v: str(v)[:20])
async def test_enqueue_and_enqueue_workflow_refuse_the_same_out_of_bounds_options(
    dsn: str, roles: dict[Role, str], option: str, value: Any, message: str
) -> None:
    """A producer's enqueue() and a workflow step alike are refused an oversized payload, a
    priority outside smallint, a budget outside 1 to 1000 and a malformed queue, with
    invalid_parameter_value and a hint; nothing is written."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            f"INSERT INTO {SCHEMA}.task_policies (task, queue, priority, max_attempts, declared_by)"
            " VALUES ('sec.task', 'sec', 0, 3, 'w')"
        )
    payload = json.dumps({"blob": "x" * value}) if option == "payload" else "{}"
    step: dict[str, Any] = {"name": "a", "task": "sec.task", "payload": json.loads(payload)}
    if option != "payload":
        step[option] = value
    arg = "" if option == "payload" else f", {option} => %s"
    with psycopg.connect(as_role(dsn, roles[Role.PRODUCER]), autocommit=True) as conn:
        for call, params in (
            (
                f"SELECT * FROM {SCHEMA}.enqueue('sec.task', %s::jsonb{arg})",
                [payload, value][: 2 if arg else 1],
            ),
            (f"SELECT * FROM {SCHEMA}.enqueue_workflow('wf', %s::jsonb)", [json.dumps([step])]),
        ):
            with pytest.raises(errors.InvalidParameterValue, match=message) as refused:
                conn.execute(call, params)
            assert refused.value.diag.message_hint
    assert _one(dsn, f"SELECT count(*) FROM {SCHEMA}.jobs") == 0
    assert _one(dsn, f"SELECT count(*) FROM {SCHEMA}.workflows") == 0


async def test_a_workflow_step_takes_its_tasks_policy_and_the_same_bounds(
    dsn: str, roles: dict[Role, str]
) -> None:
    """A step that leaves its options out gets the task's declared queue, priority and budget, as
    enqueue() does; a step that gives them in bounds keeps its own."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            f"INSERT INTO {SCHEMA}.task_policies (task, queue, priority, max_attempts, declared_by)"
            " VALUES ('sec.task', 'sec', 7, 3, 'w')"
        )
    steps = [
        {"name": "a", "task": "sec.task"},
        {"name": "b", "task": "sec.task", "queue": "other", "priority": -2, "max_attempts": 1000},
    ]
    with psycopg.connect(as_role(dsn, roles[Role.PRODUCER]), autocommit=True) as conn:
        conn.execute(f"SELECT * FROM {SCHEMA}.enqueue_workflow('wf', %s::jsonb)", [json.dumps(steps)])
        conn.execute(f"SELECT * FROM {SCHEMA}.enqueue('sec.task')")
    with psycopg.connect(dsn) as admin:
        rows = admin.execute(
            f"SELECT queue, priority, max_attempts FROM {SCHEMA}.jobs ORDER BY id"
        ).fetchall()
    assert rows == [("sec", 7, 3), ("other", -2, 1000), ("sec", 7, 3)]


# -- the task catalog takes only what jobs take -------------------------------------------------

STATES = ("scheduled", "pending", "running", "succeeded", "dead", "cancelled")


def _accepted(conn: psycopg.Connection[Any], statement: str, params: list[Any]) -> bool:
    try:
        with conn.transaction():
            conn.execute(statement, params)
            raise _RolledBack
    except _RolledBack:
        return True
    except psycopg.errors.CheckViolation:
        return False


class _RolledBack(Exception):
    """Leaves a trial insert's transaction without keeping its row."""


def test_task_policies_accept_exactly_the_values_jobs_accept(dsn: str) -> None:
    """For every set of unique states, and for edge queue names, budgets and task names, a
    task_policies row is accepted exactly when a job with those values is: a declared policy
    can never make its task's every enqueue fail a check."""
    scopes = [
        "{" + ",".join(c) + "}" for n in range(len(STATES) + 1) for c in itertools.combinations(STATES, n)
    ]
    values: list[tuple[str, Any]] = [("unique_states", s) for s in scopes]
    values += [("queue", q) for q in ("a", "billing.v2", "-a", "a b", "q" * 63, "q" * 64, "")]
    values += [("max_attempts", n) for n in (-1, 0, 1, 1000, 1001)]
    values += [("task", t) for t in ("", "t", "t" * 200, "t" * 201)]
    job = {"task": "t", "queue": "q", "max_attempts": 3, "unique_states": None}
    policy = {**job, "unique_states": "{scheduled,pending,running}"}
    differ = []
    with psycopg.connect(dsn) as conn:
        for column, value in values:
            j, p = {**job, column: value}, {**policy, column: value}
            as_job = _accepted(
                conn,
                f"INSERT INTO {SCHEMA}.jobs (task, queue, max_attempts, unique_key, unique_states)"
                " VALUES (%s, %s, %s, CASE WHEN %s::text IS NULL THEN NULL ELSE %s || ':k' END, %s)",
                [j["task"], j["queue"], j["max_attempts"], j["unique_states"], j["task"], j["unique_states"]],
            )
            as_policy = _accepted(
                conn,
                f"INSERT INTO {SCHEMA}.task_policies (task, queue, priority, max_attempts, unique_whole,"
                " unique_states, declared_by) VALUES (%s, %s, 0, %s, true, %s, 'w')",
                [p["task"], p["queue"], p["max_attempts"], p["unique_states"]],
            )
            if as_job != as_policy:
                differ.append((column, value, as_job, as_policy))
    assert differ == []
    assert sum(1 for column, value in values if column == "unique_states") == 64


# -- every enqueued job comes back with its key --------------------------------------------------


async def test_every_job_a_producer_enqueues_comes_back_with_its_stored_key(
    dsn: str, roles: dict[Role, str]
) -> None:
    """Through the producer role (enqueue() underneath), one job, a batch, a unique job and a
    job with an ordering key each come back with the idempotency key the database stored."""
    async with Client(as_role(dsn, roles[Role.PRODUCER]), schema=SCHEMA) as client:
        enqueued = [await client.enqueue("sec.task", {"n": 0}, queue="sec")]
        enqueued += await client.enqueue_many(
            [JobSpec(task="sec.task", queue="sec", payload={"n": n}) for n in (1, 2)]
        )
        enqueued.append(await client.enqueue("sec.task", {"n": 3}, queue="sec", unique="k"))
        enqueued.append(await client.enqueue("sec.task", {"n": 4}, queue="sec", ordering_key="acct-1"))
    with psycopg.connect(dsn) as admin:
        stored = dict(admin.execute(f"SELECT id, idempotency_key FROM {SCHEMA}.jobs").fetchall())
    assert len(stored) == 5
    assert {j.id: j.idempotency_key for j in enqueued} == stored


async def test_a_producer_may_not_give_a_job_a_key_the_unique_index_skips(
    dsn: str, roles: dict[Role, str]
) -> None:
    """enqueue() refuses a key of version 8, the form of the generated keys no index checks, so
    a producer cannot give a job another job's generated key; the keys the client makes for the
    producer's unkeyed jobs are of version 4, which the unique index holds."""
    async with Client(dsn, schema=SCHEMA) as client:
        generated = await client.enqueue("sec.task", queue="sec")
    assert generated.idempotency_key is not None and generated.idempotency_key.version == 8
    producer = as_role(dsn, roles[Role.PRODUCER])
    with psycopg.connect(producer, autocommit=True) as conn:
        with pytest.raises(errors.InvalidParameterValue, match="is a version 8 UUID") as refused:
            conn.execute(
                f"SELECT * FROM {SCHEMA}.enqueue('sec.task', queue => 'sec', idempotency_key => %s)",
                [generated.idempotency_key],
            )
        assert (
            refused.value.diag.message_hint
            == "leave it out for a generated key, or give a UUID of another version"
        )
    async with Client(producer, schema=SCHEMA) as client:
        mine = await client.enqueue("sec.task", queue="sec")
    assert mine.idempotency_key is not None and mine.idempotency_key.version == 4
    assert _one(dsn, f"SELECT count(*) FROM {SCHEMA}.jobs") == 2


async def test_the_upgrade_frees_the_keys_cancelled_jobs_held_and_mends_declared_scopes(
    empty_dsn: str,
) -> None:
    """Upgrading a schema where a cancelled job's scope held its key and a task declared a scope
    no job can take: the key is free for the real job, the waiting job keeps its key without
    cancelled, and the declared scope becomes one enqueue() takes."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, SCHEMA, up_to=18)
        for key, state, finished in (
            ('billing.refund:{"order_id":42}', "cancelled", "now()"),
            ("billing.refund:w", "pending", "NULL"),
        ):
            await conn.execute(
                f"INSERT INTO {SCHEMA}.jobs (queue, task, state, finished_at, unique_key, unique_states)"
                f" VALUES ('parking', 'billing.refund', '{state}', {finished}, %s, %s)",
                [key, ALL_STATES],
            )
        await conn.execute(
            f"INSERT INTO {SCHEMA}.task_policies (task, queue, priority, max_attempts, unique_fields,"
            " unique_states, declared_by)"
            " VALUES ('billing.refund', 'billing', 0, 5, '{order_id}', '{succeeded}', 'w')"
        )
        await migrate(conn, SCHEMA)
    assert (
        _one(empty_dsn, f"SELECT array_agg(unique_states::text ORDER BY id) FROM {SCHEMA}.jobs")
        == ["{scheduled,pending,running,succeeded,dead}"] * 2
    )
    assert _one(empty_dsn, f"SELECT unique_states::text FROM {SCHEMA}.task_policies") == (
        "{scheduled,pending,running,succeeded}"
    )
    assert (
        _one(empty_dsn, f"SELECT existing FROM {SCHEMA}.enqueue('billing.refund', '{{\"order_id\": 42}}')")
        is False
    )

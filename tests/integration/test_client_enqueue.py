"""The producer API (Client, SyncClient, Tenure.enqueue): bad input is refused before anything is
written, enqueue joins the caller's transaction, COPY round-trips payloads, and a missing schema or
server is reported with the fix."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection

import tenure
from tenure import Client, JobSpec, SyncClient, Tenure, ValidationError
from tenure.db.channels import notify_channel
from tenure.model.validation import DEFAULT_MAX_PAYLOAD_BYTES

CHANNEL = notify_channel("tenure")


async def counts(db: AsyncConnection[Any]) -> tuple[int, int]:
    row = await (
        await db.execute(
            "SELECT (SELECT count(*) FROM tenure.jobs), (SELECT count(*) FROM tenure.job_events)"
        )
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def nested(depth: int) -> dict[str, Any]:
    payload: dict[str, Any] = {"leaf": True}
    for _ in range(depth):
        payload = {"n": payload}
    return payload


BAD_CALLS: list[tuple[dict[str, Any], list[str]]] = [
    ({"payload": [1, 2]}, ["payload must be a JSON object", "dict of keyword arguments"]),
    ({"payload": "text"}, ["payload must be a JSON object"]),
    ({"payload": {"a": "nul\x00here"}}, ["NUL character", "remove it or encode"]),
    ({"payload": {"k\x00": 1}}, ["key", "NUL character"]),
    ({"payload": {"a": "\ud83d"}}, ["not valid UTF-8", "base64"]),
    ({"payload": {"\udc80": 1}}, ["not valid UTF-8"]),
    ({"payload": {"a": math.nan}}, ["JSON cannot represent", "use null or a string"]),
    ({"payload": {"when": datetime.now(UTC)}}, ["datetime, which is not JSON", "ISO string"]),
    ({"payload": nested(200)}, ["nested deeper than 64 levels", "flatten"]),
    ({"payload": {"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)}}, ["over the limit of 1048576", "reference"]),
    ({"queue": "no spaces"}, ["invalid queue name 'no spaces'", "for example"]),
    ({"queue": ""}, ["invalid queue name"]),
    ({"queue": "q" * 64}, ["invalid queue name"]),
    ({"max_attempts": 0}, ["max_attempts 0 is invalid", "from 1 to"]),
    ({"max_attempts": -5}, ["max_attempts -5 is invalid"]),
    ({"priority": 99_999}, ["priority 99999 is out of range", "-32768 to 32767"]),
    ({"priority": "urgent"}, ["priority 'urgent' is out of range"]),
    ({"delay": -1.0}, ["delay -1.0 is invalid", "seconds >= 0"]),
    ({"delay": timedelta(seconds=-5)}, ["delay -5.0 is invalid"]),
    ({"delay": 1e15}, ["delay", "at most"]),
    ({"delay": math.inf}, ["delay inf is invalid"]),
    ({"run_at": datetime(2030, 1, 1)}, ["timezone-aware"]),
    ({"run_at": "tomorrow"}, ["timezone-aware"]),
    ({"delay": 5, "run_at": datetime.now(UTC)}, ["either run_at or delay"]),
]


async def test_bad_input_is_refused_and_nothing_is_written(dsn: str, db: AsyncConnection[Any]) -> None:
    """Each kind of bad input raises ValidationError naming the problem and the fix; no row is written."""
    async with Client(dsn) as client:
        for options, fragments in BAD_CALLS:
            kwargs = {"payload": {"ok": 1}, **options}
            payload = kwargs.pop("payload")
            with pytest.raises(ValidationError) as info:
                await client.enqueue("emails.send", payload, **{"queue": "emails", **kwargs})
            for fragment in fragments:
                assert fragment in str(info.value), (options, str(info.value))
        with pytest.raises(ValidationError, match="invalid task name"):
            await client.enqueue("", {}, queue="q")
        with pytest.raises(ValidationError, match="invalid task name"):
            await client.enqueue("bad\x00task", {}, queue="q")
    assert await counts(db) == (0, 0)


async def test_one_bad_job_in_a_batch_writes_none_of_it(dsn: str, db: AsyncConnection[Any]) -> None:
    """enqueue_many and enqueue_copy validate every job first: one bad job means no job is written."""
    good = [JobSpec(task="t", queue="default", payload={"i": i}) for i in range(5)]
    bad = JobSpec(task="t", queue="default", payload={"s": "\x00"})
    async with Client(dsn) as client:
        with pytest.raises(ValidationError, match="NUL"):
            await client.enqueue_many([*good, bad])
        with pytest.raises(ValidationError, match="NUL"):
            await client.enqueue_copy([*good, bad])
    with SyncClient(dsn) as sync_client:
        with pytest.raises(ValidationError, match="NUL"):
            sync_client.enqueue_many([*good, bad])
        with pytest.raises(ValidationError, match="NUL"):
            sync_client.enqueue_copy([*good, bad])
        with pytest.raises(ValidationError, match="max_attempts"):
            sync_client.enqueue("t", {}, queue="default", max_attempts=0)
    assert await counts(db) == (0, 0)


async def test_payload_must_fit_a_registered_handler(dsn: str, db: AsyncConnection[Any]) -> None:
    """With the task registered, a payload that does not bind to the handler's arguments is refused."""
    app = Tenure(dsn)

    @app.task(name="greet")
    async def greet(ctx: tenure.JobContext, name: str) -> None: ...

    try:
        with pytest.raises(ValidationError, match="payload does not fit task 'greet'"):
            await app.enqueue("greet", {"nom": "x"})
        with pytest.raises(ValidationError, match="payload does not fit"):
            app.enqueue_sync(greet, {})
        assert await counts(db) == (0, 0)
        await app.enqueue(greet, {"name": "ada"})
        assert await counts(db) == (1, 0)
    finally:
        await app.close()


async def test_payload_size_limit_is_one_mib_by_default_and_configurable(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A payload just under 1 MiB is stored; over it is refused; max_payload_bytes moves the limit."""
    overhead = len('{"s":""}')
    async with Client(dsn) as client:
        job = await client.enqueue("t", {"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES - overhead)}, queue="default")
        stored = await client.get_job(job.id)
        assert stored is not None and len(stored.payload["s"]) == DEFAULT_MAX_PAYLOAD_BYTES - overhead
        with pytest.raises(ValidationError, match="over the limit"):
            await client.enqueue(
                "t", {"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES - overhead + 1)}, queue="default"
            )
    async with Client(dsn, max_payload_bytes=100) as small:
        with pytest.raises(ValidationError, match="over the limit of 100"):
            await small.enqueue("t", {"s": "x" * 100}, queue="default")
    app = Tenure(dsn, max_payload_bytes=2 * DEFAULT_MAX_PAYLOAD_BYTES)
    try:
        await app.enqueue("t", {"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES + 10)}, queue="default")
        with pytest.raises(ValidationError, match="over the limit"):
            app.enqueue_sync("t", {"s": "x" * (2 * DEFAULT_MAX_PAYLOAD_BYTES)}, queue="default")
    finally:
        await app.close()
    assert (await counts(db))[0] == 2


# -- the task's policy and signature (what a worker of the app will run) --------------------------


async def stored_options(db: AsyncConnection[Any]) -> list[tuple[Any, ...]]:
    cur = await db.execute("SELECT task, queue, priority, max_attempts FROM tenure.jobs ORDER BY id")
    return await cur.fetchall()


async def test_enqueue_applies_the_registered_tasks_policy_unless_overridden(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """By Task or by its registered name, async or blocking, a job gets the task's queue, priority
    and max_attempts; options passed explicitly win."""
    app = Tenure(dsn)

    @app.task(queue="emails", priority=3, max_attempts=3)
    async def send(ctx: tenure.JobContext, to: str) -> None: ...

    try:
        await app.enqueue(send, {"to": "a@b.c"})
        await app.enqueue(send.name, {"to": "a@b.c"})
        app.enqueue_sync(send.name, {"to": "a@b.c"})
        await app.enqueue(send, {"to": "a@b.c"}, queue="urgent", priority=9, max_attempts=1)
    finally:
        await app.close()
    name = f"{__name__}.test_enqueue_applies_the_registered_tasks_policy_unless_overridden.<locals>.send"
    assert send.name == name
    assert await stored_options(db) == [
        (name, "emails", 3, 3),
        (name, "emails", 3, 3),
        (name, "emails", 3, 3),
        (name, "urgent", 9, 1),
    ]


async def test_enqueue_many_and_copy_apply_the_policy_and_check_the_signature(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """JobSpecs of a registered task take its policy in enqueue_many and enqueue_copy (async and
    blocking), and one payload that does not fit the handler refuses the whole batch."""
    app = Tenure(dsn)

    @app.task(name="mail.send", queue="emails", max_attempts=3)
    def send(ctx: tenure.JobContext, to: str) -> None: ...

    good = JobSpec(task="mail.send", payload={"to": "a@b.c"})
    misfit = JobSpec(task="mail.send", payload={"too": "a@b.c"})
    try:
        for write in (
            lambda specs: app.client.enqueue_many(specs),
            lambda specs: app.client.enqueue_copy(specs),
        ):
            with pytest.raises(ValidationError, match=r"payload does not fit task 'mail.send'.*\(to\)"):
                await write([good, misfit])
        for write_sync in (app.sync_client.enqueue_many, app.sync_client.enqueue_copy):
            with pytest.raises(ValidationError, match="missing a required argument: 'to'"):
                write_sync([good, misfit])
        assert await counts(db) == (0, 0)
        await app.client.enqueue_many([good])
        await app.client.enqueue_copy([good])
        app.sync_client.enqueue_many([good])
        app.sync_client.enqueue_copy([good])
    finally:
        await app.close()
    assert await stored_options(db) == [("mail.send", "emails", 0, 3)] * 4
    assert good.queue is None  # the caller's spec is not changed


async def test_a_bad_job_deep_in_a_copy_load_writes_nothing(dsn: str, db: AsyncConnection[Any]) -> None:
    """enqueue_copy checks each job as it streams it: one bad job after thousands already sent
    aborts the COPY, nothing of the load is stored (async and blocking), and the client goes on."""
    good = [JobSpec(task="bulk.item", payload={"i": i}, queue="bulk") for i in range(5000)]
    bad = JobSpec(task="bulk.item", payload={"when": datetime.now(UTC)}, queue="bulk")
    async with tenure.Client(dsn) as client:
        with pytest.raises(ValidationError, match="is a datetime, which is not JSON"):
            await client.enqueue_copy([*good, bad, *good[:10]])
        assert await counts(db) == (0, 0)
        assert await client.enqueue_copy(good[:3]) == 3
    with tenure.SyncClient(dsn) as sync_client:
        with pytest.raises(ValidationError, match="is a datetime, which is not JSON"):
            sync_client.enqueue_copy([*good, bad])
        assert sync_client.enqueue_copy(good[:2]) == 2
    assert (await (await db.execute("SELECT count(*) FROM tenure.jobs")).fetchone()) == (5,)


async def test_a_task_the_app_does_not_know_needs_an_explicit_queue(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """An unregistered name without a queue is refused naming the closest registered task; with
    queue= it is enqueued by name there, with priority 0 and 20 attempts."""
    app = Tenure(dsn)

    @app.task(name="shop.tasks.send_receipt", queue="emails")
    async def send_receipt(ctx: tenure.JobContext, order_id: int) -> None: ...

    try:
        with pytest.raises(tenure.UnknownTask) as info:
            await app.enqueue("shop.tasks.send_reciept", {"order_id": 1})
        assert "did you mean 'shop.tasks.send_receipt'?" in str(info.value)
        assert "pass queue=" in str(info.value)
        with pytest.raises(tenure.UnknownTask, match=r"registered: 'shop\.tasks\.send_receipt'"):
            app.enqueue_sync("billing.charge", {})
        with pytest.raises(tenure.UnknownTask):
            await app.client.enqueue_many([JobSpec(task="billing.charge")])
        assert await counts(db) == (0, 0)
        await app.enqueue("billing.charge", {"any": "thing"}, queue="billing")
    finally:
        await app.close()
    async with Client(dsn) as bare:
        with pytest.raises(tenure.UnknownTask, match="this client, which has no registered tasks"):
            await bare.enqueue("billing.charge", {})
        await bare.enqueue("billing.charge", {}, queue="billing", max_attempts=4)
    assert await stored_options(db) == [
        ("billing.charge", "billing", 0, 20),
        ("billing.charge", "billing", 0, 4),
    ]


# -- enqueue inside the caller's transaction ------------------------------------------------------


async def listen(dsn: str) -> AsyncConnection[Any]:
    conn = await AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(CHANNEL)))
    return conn


async def drain(listener: AsyncConnection[Any], timeout: float, expect: int | None = None) -> list[str]:
    """The notifications that arrive within `timeout` (or as soon as `expect` of them did)."""
    return [n.payload async for n in listener.notifies(timeout=timeout, stop_after=expect)]


async def test_enqueue_in_rolled_back_transaction_leaves_no_job_and_no_notification(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Enqueued with conn= inside a transaction that rolls back: no job exists and no NOTIFY arrives."""
    listener = await listen(dsn)
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as conn, Client(dsn) as client:

            class Abort(Exception):
                pass

            with pytest.raises(Abort):
                async with conn.transaction():
                    await conn.execute("CREATE TABLE orders (id int)")
                    job = await client.enqueue("t", {"order": 1}, conn=conn, queue="orders")
                    assert job.id > 0
                    raise Abort
            assert await drain(listener, 0.5) == []
        assert await counts(db) == (0, 0)
    finally:
        await listener.close()


async def test_enqueue_in_committed_transaction_notifies_only_after_commit(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Enqueued with conn= inside a transaction: invisible and unannounced until commit, then both."""
    listener = await listen(dsn)
    app = Tenure(dsn)
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
            async with conn.transaction():
                job = await app.enqueue("t", {"order": 2}, conn=conn, queue="orders")
                assert await drain(listener, 0.3) == []
                assert await counts(db) == (0, 0)  # another session cannot see it yet
            assert await drain(listener, 2.0, expect=1) == ["orders"]
        stored = await app.client.get_job(job.id)
        assert stored is not None and stored.payload == {"order": 2} and stored.queue == "orders"
    finally:
        await app.close()
        await listener.close()


async def test_sync_enqueue_joins_the_callers_transaction(dsn: str, db: AsyncConnection[Any]) -> None:
    """SyncClient.enqueue(conn=...) commits and rolls back with the caller's own transaction."""
    listener = await listen(dsn)
    try:
        with SyncClient(dsn) as client, psycopg.connect(dsn) as conn:
            client.enqueue("t", {"n": 1}, conn=conn, queue="default")
            conn.rollback()
            assert await drain(listener, 0.3) == []
            client.enqueue("t", {"n": 2}, conn=conn, queue="default")
            conn.commit()
        assert await drain(listener, 2.0, expect=1) == ["default"]
        rows = await (await db.execute("SELECT payload FROM tenure.jobs")).fetchall()
        assert rows == [({"n": 2},)]
    finally:
        await listener.close()


# -- bulk enqueue through COPY --------------------------------------------------------------------

PAYLOADS: list[dict[str, Any]] = [
    {},
    {"s": "plain"},
    {"unicode": "é ☃ 😀 中文 \u200b", "quote": "a\"b\\c'd", "ws": "l1\nl2\tt\r", "": "empty key"},
    {"nested": {"a": [1, 2, {"b": None}], "deep": nested(40)}},
    {"ints": [0, -1, 2**63 - 1, -(2**63), 2**80, -(2**100)]},
    {"floats": [0.1, -2.5, 1e-7, 123456.789, 0.0, 2.0**52 + 0.5]},
    {"bools": [True, False], "null": None, "empty": {"list": [], "obj": {}, "str": ""}},
    {"order": {"z": 1, "a": 2, "m": 3}},
    {"big": "x" * 200_000},
]


def exact(value: Any) -> str:
    """A canonical rendering that distinguishes 1 from 1.0 and True from 1."""
    return json.dumps(value, sort_keys=True)


async def test_copy_round_trips_payloads_and_options_exactly(dsn: str, db: AsyncConnection[Any]) -> None:
    """Async and sync COPY store every payload and job option exactly as given, like INSERT, and
    both make a job due later `scheduled`, the rest `pending`."""
    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    specs = [
        JobSpec(task=f"t{i}", payload=p, queue=f"q{i % 3}", priority=i - 4, max_attempts=i + 1)
        for i, p in enumerate(PAYLOADS)
    ]
    specs.append(
        JobSpec(task="later", queue="default", payload={"x": 1}, priority=0, max_attempts=20, run_at=run_at)
    )
    specs.append(
        JobSpec(task="delayed", queue="default", payload={"x": 2}, priority=0, max_attempts=20, delay=3600)
    )
    async with Client(dsn) as client:
        assert await client.enqueue_copy(specs) == len(specs)
        inserted = await client.enqueue_many(specs)
    with SyncClient(dsn) as sync_client:
        assert sync_client.enqueue_copy(specs) == len(specs)
    rows = await (
        await db.execute(
            "SELECT task, payload, queue, priority, max_attempts, available_at, created_at, state::text "
            "FROM tenure.jobs ORDER BY id"
        )
    ).fetchall()
    assert len(rows) == 3 * len(specs)
    for batch in range(3):
        for spec, row in zip(specs, rows[batch * len(specs) : (batch + 1) * len(specs)], strict=True):
            task, payload, queue, priority, max_attempts, available_at, created_at, state = row
            assert (task, queue, priority, max_attempts, state) == (
                spec.task,
                spec.queue,
                spec.priority,
                spec.max_attempts,
                "scheduled" if spec.run_at or spec.delay else "pending",
            )
            assert exact(payload) == exact(spec.payload), spec.task
            if spec.run_at is not None:
                assert available_at == spec.run_at
            elif spec.delay:
                assert abs((available_at - created_at).total_seconds() - spec.delay) < 5
    assert len(inserted) == len(specs)


async def test_accepted_floats_come_back_equal_and_changing_ones_are_refused(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Accepted floats come back from jsonb equal; floats jsonb would change are refused."""
    floats = [1e16, 1.5e20, 1e300 / 1e284, 0.1, 1e-300, 5e-324, 2.0**53 + 2, -123.456e10]
    async with Client(dsn) as client:
        [job] = await client.enqueue_many([JobSpec(task="t", queue="default", payload={"f": floats})])
        await client.enqueue_copy([JobSpec(task="t", queue="default", payload={"f": floats})])
        with pytest.raises(ValidationError, match="different number"):
            await client.enqueue("t", {"f": 2.0**60}, queue="default")
        with pytest.raises(ValidationError, match="different number"):
            await client.enqueue_copy([JobSpec(task="t", queue="default", payload={"f": 1e300})])
    rows = await (await db.execute("SELECT id, payload FROM tenure.jobs ORDER BY id")).fetchall()
    assert [r[1]["f"] for r in rows] == [floats, floats]
    assert rows[0][0] == job.id


async def test_copy_wakes_listeners_once_per_queue(dsn: str) -> None:
    """A COPY load notifies each affected queue after it commits."""
    listener = await listen(dsn)
    try:
        async with Client(dsn) as client:
            await client.enqueue_copy([JobSpec(task="t", queue=q) for q in ("a", "b", "a", "a")])
        assert sorted(await drain(listener, 2.0, expect=2)) == ["a", "b"]
        assert await drain(listener, 0.2) == []
    finally:
        await listener.close()


# -- missing schema, missing server ---------------------------------------------------------------


async def test_unmigrated_schema_raises_schema_not_migrated_with_the_fix(empty_dsn: str) -> None:
    """Every producer and the worker on a database without the schema say to run `tenure migrate`."""
    async with Client(empty_dsn) as client:
        for call in (
            lambda: client.enqueue("t", {}, queue="default"),
            lambda: client.enqueue_copy([JobSpec(task="t", queue="default")]),
            lambda: client.get_job(1),
            lambda: client.job_history(1),
        ):
            with pytest.raises(tenure.SchemaNotMigrated) as info:
                await call()
            assert "tenure migrate" in str(info.value)
    with SyncClient(empty_dsn) as sync_client:
        for sync_call in (
            lambda: sync_client.enqueue("t", {}, queue="default"),
            lambda: sync_client.enqueue_copy([JobSpec(task="t", queue="default")]),
        ):
            with pytest.raises(tenure.SchemaNotMigrated, match="tenure migrate"):
                sync_call()
    app = Tenure(empty_dsn, schema="other")
    with pytest.raises(tenure.SchemaNotMigrated, match="tenure migrate --schema other"):
        await app.worker(listen=False).run()
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        rows = await (
            await conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tenure%%'")
        ).fetchall()
        assert rows == []  # nothing was created by the failed calls


UNREACHABLE = "postgresql://alice:hunter2secret@127.0.0.1:1/jobs"


async def test_unreachable_server_raises_database_unavailable_without_the_password() -> None:
    """A closed port fails fast with DatabaseUnavailable naming host:port, never the password."""
    app = Tenure(UNREACHABLE)
    calls = [
        lambda: Client(UNREACHABLE).enqueue("t", {}, queue="default"),
        lambda: app.enqueue("t", {}, queue="default"),
        lambda: app.migrate(),
        lambda: app.worker(listen=False).run(),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(tenure.DatabaseUnavailable) as info:
            await call()
        message = str(info.value)
        assert "127.0.0.1:1" in message and "hunter2secret" not in message
        assert "--dsn" in message  # names the fix
        assert time.monotonic() - started < 5
    started = time.monotonic()
    with pytest.raises(tenure.DatabaseUnavailable) as sync_info:
        SyncClient(UNREACHABLE).enqueue("t", {}, queue="default")
    assert "127.0.0.1:1" in str(sync_info.value) and "hunter2secret" not in str(sync_info.value)
    assert time.monotonic() - started < 5


def test_malformed_dsn_is_reported_without_the_password() -> None:
    """A DSN that does not parse, or has a bad port, is refused naming the problem, never the password."""
    with pytest.raises(tenure.DatabaseUnavailable) as info:
        SyncClient("host=127.0.0.1 password=hunter2secret port").enqueue("t", {}, queue="default")
    assert "hunter2secret" not in str(info.value)
    assert "could not be parsed after its password" in str(info.value)
    with pytest.raises(tenure.DatabaseUnavailable) as port_info:
        SyncClient("postgresql://alice:hunter2secret@127.0.0.1:notaport/db").enqueue("t", {}, queue="default")
    assert "hunter2secret" not in str(port_info.value) and "notaport" in str(port_info.value)


# -- inspection: get_job and job_history, async and blocking --------------------------------------


async def test_sync_client_reads_a_job_and_its_history_like_the_async_client(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """SyncClient.get_job and job_history return what Client's do: the row, and its audit events."""
    from tenure.db.queries import Queries

    q = Queries("tenure")
    [job] = await q.job_insert_many(db, [JobSpec(task="t", queue="default", max_attempts=3)])
    [claimed] = await q.job_claim(
        db, queue="default", owner="w1", limit=1, default_lease_seconds=30, default_runtime_seconds=60
    )
    await q.job_fail(
        db,
        job_id=job.id,
        owner="w1",
        token=claimed.lease.token,
        error_code="TIMEOUT",
        error="upstream timed out",
        retry_delay=0,
    )
    async with Client(dsn) as client:
        expected_job, expected_history = await client.get_job(job.id), await client.job_history(job.id)
        assert await client.get_job(job.id + 1000) is None
    with SyncClient(dsn) as sync_client:
        stored = sync_client.get_job(job.id)
        history = sync_client.job_history(job.id)
        assert sync_client.get_job(job.id + 1000) is None
        assert sync_client.job_history(job.id + 1000) == []
    assert stored == expected_job and history == expected_history
    assert stored is not None and stored.state is tenure.JobState.PENDING and stored.attempt_count == 1
    assert [(e.event, e.to_state, e.error_code) for e in history] == [
        ("retry", tenure.JobState.PENDING, "TIMEOUT")
    ]


def test_sync_client_inspection_on_an_unmigrated_schema_names_the_fix(empty_dsn: str) -> None:
    """SyncClient.get_job and job_history on a database without the schema raise SchemaNotMigrated."""
    with SyncClient(empty_dsn) as client:
        for call in (lambda: client.get_job(1), lambda: client.job_history(1)):
            with pytest.raises(tenure.SchemaNotMigrated, match="tenure migrate"):
                call()

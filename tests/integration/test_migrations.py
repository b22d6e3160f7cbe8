"""Migrations: idempotent, safe to run concurrently, and the fresh snapshot equals the numbered
migrations applied in order."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection

import tenure
from tenure.db.migrate import applied_versions, known_versions, latest_version, migrate, schema_version

ALL_VERSIONS = known_versions()


async def fetch(conn: AsyncConnection[Any], query: str, params: Any = None) -> list[tuple[Any, ...]]:
    return await (await conn.execute(query, params)).fetchall()


async def test_migrate_twice_applies_nothing_the_second_time(empty_dsn: str) -> None:
    """The first migrate applies every version; a second one applies nothing and changes nothing."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        first = await migrate(conn, "tenure")
        assert first.applied == ALL_VERSIONS and first.current == latest_version()
        before = await catalog(conn, "tenure")
        second = await migrate(conn, "tenure")
        assert second.applied == [] and second.current == latest_version()
        assert await catalog(conn, "tenure") == before
        assert await schema_version(conn, "tenure") == latest_version()
        rows = await fetch(conn, "SELECT version FROM tenure.schema_migrations ORDER BY version")
        assert [r[0] for r in rows] == ALL_VERSIONS


async def test_migrate_on_an_already_migrated_database_is_a_no_op(dsn: str) -> None:
    """Migrating the test template's schema again, in either mode, applies nothing."""
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert (await migrate(conn, "tenure")).applied == []
        assert (await migrate(conn, "tenure", fresh_snapshot=False)).applied == []


async def test_concurrent_migrations_both_succeed_and_apply_once(empty_dsn: str) -> None:
    """Two migrate calls racing on an empty database both succeed; the versions are applied once."""
    async with (
        await AsyncConnection.connect(empty_dsn, autocommit=True) as gate,
        await AsyncConnection.connect(empty_dsn, autocommit=True) as a,
        await AsyncConnection.connect(empty_dsn, autocommit=True) as b,
    ):
        # Hold the migration lock so both callers are certainly waiting at once, then let them race.
        await gate.execute("SELECT pg_advisory_lock(hashtext('tenure.migrate'), hashtext('tenure'))")
        racing = asyncio.gather(migrate(a, "tenure"), migrate(b, "tenure"))
        pids = (a.info.backend_pid, b.info.backend_pid)
        for _ in range(500):
            # Waiters poll the lock (see migrate.py): both have tried it while the gate holds it.
            waiting = await fetch(
                gate,
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) "
                "AND query LIKE '%%pg_try_advisory_lock%%'",
                (list(pids),),
            )
            if waiting[0][0] == 2:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the two migrations never waited on the lock together")
        assert not racing.done()
        await gate.execute("SELECT pg_advisory_unlock(hashtext('tenure.migrate'), hashtext('tenure'))")
        first, second = await racing
        assert sorted([first.applied, second.applied]) == [[], ALL_VERSIONS]
        rows = await fetch(gate, "SELECT version, count(*) FROM tenure.schema_migrations GROUP BY version")
        assert sorted(rows) == [(v, 1) for v in ALL_VERSIONS]
        assert await fetch(gate, "SELECT count(*) FROM tenure.jobs") == [(0,)]


async def test_concurrent_migrations_without_a_gate(empty_dsn: str) -> None:
    """Four unsynchronised migrate calls on an empty database all succeed and record each version once."""
    conns = [await AsyncConnection.connect(empty_dsn, autocommit=True) for _ in range(4)]
    try:
        reports = await asyncio.gather(*(migrate(c, "tenure") for c in conns))
        assert sorted(len(r.applied) for r in reports) == [0, 0, 0, len(ALL_VERSIONS)]
        rows = await fetch(conns[0], "SELECT count(*) FROM tenure.schema_migrations")
        assert rows == [(len(ALL_VERSIONS),)]
    finally:
        for c in conns:
            await c.close()


# -- the fresh snapshot equals the numbered migrations -----------------------------------------

CATALOG_QUERIES = {
    "relations": """
        SELECT c.relname, c.relkind::text, c.relpersistence::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(s)s ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text, a.attgenerated::text,
               coalesce(co.collname, '')
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation AND co.collname <> 'default'
        WHERE n.nspname = %(s)s AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm')
        ORDER BY 1, 2""",
    "constraints": """
        SELECT coalesce(c.relname, t.typname), con.conname, con.contype::text,
               pg_get_constraintdef(con.oid), con.condeferrable, con.condeferred
        FROM pg_constraint con
        JOIN pg_namespace n ON n.oid = con.connamespace
        LEFT JOIN pg_class c ON c.oid = con.conrelid
        LEFT JOIN pg_type t ON t.oid = con.contypid
        WHERE n.nspname = %(s)s ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s ORDER BY 1, 2""",
    "enums": """
        SELECT t.typname, array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
        FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %(s)s GROUP BY t.typname ORDER BY 1""",
    "types": """
        SELECT t.typname, t.typtype::text FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %(s)s AND t.typtype <> 'c' AND t.typname NOT LIKE '\\_%%' ORDER BY 1""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(s)s ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname, tg.tgname, pg_get_triggerdef(tg.oid)
        FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(s)s AND NOT tg.tgisinternal ORDER BY 1, 2""",
    "views": """
        SELECT viewname, definition FROM pg_views WHERE schemaname = %(s)s ORDER BY 1""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, increment_by, max_value, cycle
        FROM pg_sequences WHERE schemaname = %(s)s ORDER BY 1""",
}


async def catalog(conn: AsyncConnection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything a schema defines, with its own name replaced by SCHEMA so two schemas compare."""
    pattern = re.compile(rf'"?\b{re.escape(schema)}\b"?\.')

    def norm(value: Any) -> Any:
        if isinstance(value, list):
            return tuple(norm(v) for v in value)
        return pattern.sub("SCHEMA.", value) if isinstance(value, str) else value

    snapshot = {}
    for name, query in CATALOG_QUERIES.items():
        rows = await fetch(conn, query, {"s": schema})
        snapshot[name] = [tuple(norm(v) for v in row) for row in rows]
    return snapshot


def differences(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> dict[str, Any]:
    return {
        k: {
            "only_fresh": sorted(set(a[k]) - set(b[k]), key=str),
            "only_steps": sorted(set(b[k]) - set(a[k]), key=str),
        }
        for k in a
        if a[k] != b[k]
    }


async def test_fresh_snapshot_equals_numbered_migrations(empty_dsn: str) -> None:
    """schema.sql (the default) and the numbered migrations in order produce identical catalogs."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        fresh = await migrate(conn, "t_fresh")
        steps = await migrate(conn, "t_steps", fresh_snapshot=False)
        assert fresh.applied == steps.applied == ALL_VERSIONS
        a, b = await catalog(conn, "t_fresh"), await catalog(conn, "t_steps")
        assert a["columns"] and a["constraints"] and a["indexes"] and a["enums"]
        assert differences(a, b) == {}
        assert a == b


DRIFTS = [
    ("ALTER TABLE t_steps.jobs ALTER COLUMN priority SET DEFAULT 1", "columns"),
    ("ALTER TABLE t_steps.jobs ALTER COLUMN last_error SET NOT NULL", "columns"),
    ("ALTER TABLE t_steps.jobs ALTER COLUMN last_error TYPE varchar(2000)", "columns"),
    ("ALTER TABLE t_steps.jobs DROP CONSTRAINT jobs_error_bounded", "constraints"),
    (
        "ALTER TABLE t_steps.jobs DROP CONSTRAINT jobs_queue_format, ADD CONSTRAINT jobs_queue_format "
        "CHECK (queue ~ '^[a-z]+$')",
        "constraints",
    ),
    ("DROP INDEX t_steps.jobs_dead_idx", "indexes"),
    (
        "DROP INDEX t_steps.jobs_running_expiry_idx; "
        "CREATE INDEX jobs_running_expiry_idx ON t_steps.jobs (lease_expires_at)",
        "indexes",
    ),
    ("ALTER TYPE t_steps.job_state ADD VALUE 'paused'", "enums"),
]


async def test_catalog_comparison_detects_each_kind_of_drift(empty_dsn: str) -> None:
    """The comparison is not vacuous: each kind of drift shows up in its catalog category."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "t_fresh")
        await migrate(conn, "t_steps", fresh_snapshot=False)
        baseline = await catalog(conn, "t_fresh")
        for change, category in DRIFTS:
            async with conn.transaction(force_rollback=True):
                await conn.execute(change)
                diff = differences(baseline, await catalog(conn, "t_steps"))
                assert category in diff, change
        assert differences(baseline, await catalog(conn, "t_steps")) == {}


async def test_schemas_are_independent(empty_dsn: str) -> None:
    """Two Tenure schemas in one database do not see each other's jobs."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "q_one")
        await migrate(conn, "q_two")
        await conn.execute("INSERT INTO q_one.jobs (queue, task) VALUES ('default', 't')")
        assert await fetch(conn, "SELECT count(*) FROM q_two.jobs") == [(0,)]
        with pytest.raises(psycopg.errors.UndefinedTable):
            await conn.execute("SELECT 1 FROM tenure.jobs")


# -- upgrading: each migration on its own, one built outside a transaction ----------------------


#: The last version whose unique index holds every idempotency key (0023 narrows it to chosen keys).
BEFORE_CHOSEN_KEYS = 22


async def downgrade_to_before_0006(conn: AsyncConnection[Any], schema: str) -> None:
    """Makes a migrated schema look as it did before migration 0006: no unique key index."""
    await conn.execute(f"DROP INDEX {schema}.jobs_idempotency_key_idx")
    await conn.execute(f"DELETE FROM {schema}.schema_migrations WHERE version = 6")


async def index_validity(conn: AsyncConnection[Any], schema: str) -> list[tuple[Any, ...]]:
    return await fetch(
        conn,
        "SELECT c.relname, i.indisvalid, i.indisunique FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'jobs_idempotency_key_idx'",
        (schema,),
    )


async def test_upgrade_builds_the_unique_key_index_concurrently_beside_live_jobs(empty_dsn: str) -> None:
    """An existing schema with jobs upgrades through 0006 (CREATE UNIQUE INDEX CONCURRENTLY, which
    fails inside a transaction) and then refuses a second job with the same key."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "tenure", fresh_snapshot=False, up_to=BEFORE_CHOSEN_KEYS)
        await downgrade_to_before_0006(conn, "tenure")
        await conn.execute(
            "INSERT INTO tenure.jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 50)"
        )
        report = await migrate(conn, "tenure", up_to=BEFORE_CHOSEN_KEYS)
        assert report.applied == [6]
        assert await index_validity(conn, "tenure") == [("jobs_idempotency_key_idx", True, True)]
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "INSERT INTO tenure.jobs (queue, task, idempotency_key) "
                "SELECT 'q', 't', idempotency_key FROM tenure.jobs LIMIT 1"
            )


async def test_duplicate_keys_stop_the_upgrade_with_the_fix_and_a_rerun_finishes_it(empty_dsn: str) -> None:
    """Duplicated keys make 0006 fail unrecorded, naming the key and where the fix is written; the
    invalid index left behind is replaced when migrate runs again after the fix."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "tenure", fresh_snapshot=False, up_to=BEFORE_CHOSEN_KEYS)
        await downgrade_to_before_0006(conn, "tenure")
        await conn.execute(
            "INSERT INTO tenure.jobs (queue, task, idempotency_key) VALUES "
            "('q', 'a', '00000000-0000-4000-8000-000000000001'), "
            "('q', 'b', '00000000-0000-4000-8000-000000000001')"
        )
        with pytest.raises(tenure.MigrationFailed) as info:
            await migrate(conn, "tenure", up_to=BEFORE_CHOSEN_KEYS)
        message = str(info.value)
        assert "migration 0006 (unique_idempotency_key) failed: 23505" in message
        assert "00000000-0000-4000-8000-000000000001" in message and "is duplicated" in message
        assert "docs/operations.md" in message and "run `tenure migrate` again" in message
        assert info.value.version == 6
        assert 6 not in await applied_versions(conn, "tenure")
        assert await index_validity(conn, "tenure") == [("jobs_idempotency_key_idx", False, True)]
        await conn.execute(
            "UPDATE tenure.jobs SET idempotency_key = gen_random_uuid() WHERE id = "
            "(SELECT max(id) FROM tenure.jobs)"
        )
        assert (await migrate(conn, "tenure", up_to=BEFORE_CHOSEN_KEYS)).applied == [6]
        assert await index_validity(conn, "tenure") == [("jobs_idempotency_key_idx", True, True)]


async def test_a_schema_missing_any_migration_is_refused_not_only_an_older_one(empty_dsn: str) -> None:
    """require_current_schema names every missing version, even below the latest applied one."""
    from tenure.db.migrate import require_current_schema

    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "tenure")
        await require_current_schema(conn, "tenure")
        await conn.execute("DELETE FROM tenure.schema_migrations WHERE version = 2")
        with pytest.raises(tenure.SchemaNotMigrated, match=r"lacks migrations \[2\]"):
            await require_current_schema(conn, "tenure")


async def test_migrate_restores_autocommit_and_refuses_an_open_transaction(empty_dsn: str) -> None:
    """On a connection without autocommit, migrate runs and gives it back as it was; inside an open
    transaction it refuses, naming the problem."""
    async with await AsyncConnection.connect(empty_dsn) as conn:
        assert not conn.autocommit
        assert (await migrate(conn, "tenure")).applied == ALL_VERSIONS
        assert not conn.autocommit
        await conn.execute("SELECT 1")
        with pytest.raises(tenure.ConfigurationError, match="not inside a transaction"):
            await migrate(conn, "tenure")


async def test_upgrade_from_version_3_moves_waiting_jobs_and_restores_aged_priorities(empty_dsn: str) -> None:
    """A database at version 3 with jobs in it upgrades through 0004 (a new enum value, committed on
    its own) and 0005 (which uses it): jobs due later become scheduled, due ones stay pending, and an
    aged job gets back the priority it was enqueued with."""
    from tenure.db.sqlfiles import migration_files, named_queries, schema_file

    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        q = named_queries("tenure")
        await conn.execute(q["migrations_table_create"])
        for version, name, path in migration_files()[:3]:
            await conn.execute(schema_file(path, "tenure").encode())
            await conn.execute(q["migration_record"], {"version": version, "name": name})
        await conn.execute(
            "INSERT INTO tenure.jobs (queue, task, priority, priority_boost, available_at) VALUES"
            " ('q', 'due', 7, 5, now() - interval '1 hour'), ('q', 'later', 0, 0, now() + interval '1 hour')"
        )
        report = await migrate(conn, "tenure")
        assert report.applied == [v for v in ALL_VERSIONS if v > 3]
        rows = await fetch(conn, "SELECT task, state::text, priority FROM tenure.jobs ORDER BY id")
        assert rows == [("due", "pending", 2), ("later", "scheduled", 0)]


def test_upgrades_build_indexes_on_busy_tables_concurrently() -> None:
    """After the first migration, every index on jobs or job_events is built CONCURRENTLY in a
    no-transaction migration, so an upgrade never holds off writes while an index builds."""
    from tenure.db.migrate import NO_TRANSACTION
    from tenure.db.sqlfiles import migration_files, schema_file

    for version, name, path in migration_files():
        if version == 1:
            continue  # creates the tables: nothing is in them yet
        text = schema_file(path, "tenure")
        for statement in re.findall(r"CREATE (?:UNIQUE )?INDEX[^;]*;", text):
            if re.search(r'ON "tenure"\.(jobs|job_events) ', statement):
                assert "CONCURRENTLY" in statement, (version, name, statement)
                assert text.startswith(NO_TRANSACTION), (version, name)


async def test_an_upgrade_from_the_first_version_with_jobs_matches_a_fresh_install(empty_dsn: str) -> None:
    """A schema at version 1 holding jobs, upgraded through every migration (indexes built
    concurrently at the end), has exactly the catalog of a fresh install."""
    from tenure.db.sqlfiles import migration_files, named_queries, schema_file

    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        q = named_queries("upgraded")
        await conn.execute("CREATE SCHEMA upgraded")
        await conn.execute(q["migrations_table_create"])
        version, name, path = migration_files()[0]
        await conn.execute(schema_file(path, "upgraded").encode())
        await conn.execute(q["migration_record"], {"version": version, "name": name})
        await conn.execute(
            "INSERT INTO upgraded.jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 500)"
        )
        await migrate(conn, "upgraded")
        await migrate(conn, "fresh")
        assert await catalog(conn, "upgraded") == await catalog(conn, "fresh")


async def test_an_upgrade_behind_a_long_reader_never_queues_enqueues_behind_it(
    empty_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A report holds jobs open while an upgrade needs jobs' table lock: the upgrade gives up its
    place in the lock queue after a moment and tries again, so enqueues keep going in (each well
    inside a 3 s statement timeout); once the report ends the upgrade finishes."""

    async with (
        await AsyncConnection.connect(empty_dsn, autocommit=True) as conn,
        await AsyncConnection.connect(empty_dsn, autocommit=True) as producer,
        await AsyncConnection.connect(empty_dsn) as report,
    ):
        await migrate(conn, "tenure", up_to=13)
        await report.execute("SELECT count(*) FROM tenure.jobs")  # holds ACCESS SHARE until it ends
        upgrading = asyncio.create_task(migrate(conn, "tenure"))
        await producer.execute("SET statement_timeout = '3s'")
        caplog.set_level("INFO", logger="tenure.migrate")
        for n in range(40):
            await producer.execute("INSERT INTO tenure.jobs (queue, task) VALUES ('q', %s)", (f"t{n}",))
            await asyncio.sleep(0.05)
        assert not upgrading.done(), "the upgrade cannot finish while the report holds the table"
        assert "waited 0.5s for a lock" in caplog.text, "the upgrade never gave up its place in the queue"
        await report.rollback()
        report_done = await upgrading
        assert report_done.applied == [v for v in ALL_VERSIONS if v > 13]
        assert await fetch(conn, "SELECT count(*) FROM tenure.jobs") == [(40,)]


async def test_the_upgrade_sets_aside_rows_no_worker_could_read_and_releases_squatted_keys(
    empty_dsn: str,
) -> None:
    """Rows written before the bounds existed (a job due at 'infinity', one created past year 9999,
    a budget of 5000, another task's unique key) are set aside as dead with INVALID_ROW and an
    audit record, a finished one is only brought inside the bounds, and the squatted key is free."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "tenure", up_to=14)
        await conn.execute(
            "INSERT INTO tenure.jobs (queue, task, state, available_at, created_at, max_attempts, unique_key,"
            " unique_states, finished_at) VALUES"
            " ('q', 'due.never', 'scheduled', 'infinity', now(), 20, NULL, NULL, NULL),"
            " ('q', 'made.later', 'pending', now(), '12000-01-01', 20, NULL, NULL, NULL),"
            " ('q', 'many.tries', 'pending', now(), now(), 5000, NULL, NULL, NULL),"
            " ('q', 'noop.never', 'pending', now(), now(), 20, 'billing.refund:k',"
            "  '{scheduled,pending,running,dead,succeeded}', NULL),"
            " ('q', 'old.done', 'succeeded', '-infinity', now(), 20, NULL, NULL, now()),"
            " ('q', 'fine', 'pending', now(), now(), 20, 'fine:k', '{scheduled,pending,running}', NULL)"
        )
        await migrate(conn, "tenure")
        rows = await fetch(
            conn,
            "SELECT task, state::text, last_error_code, unique_key IS NULL, available_at > '1899-12-31'"
            " FROM tenure.jobs ORDER BY id",
        )
        assert rows == [
            ("due.never", "dead", "INVALID_ROW", True, True),
            ("made.later", "dead", "INVALID_ROW", True, True),
            ("many.tries", "dead", "INVALID_ROW", True, True),
            ("noop.never", "dead", "INVALID_ROW", True, True),
            ("old.done", "succeeded", None, True, True),
            ("fine", "pending", None, False, True),
        ]
        events = await fetch(conn, "SELECT count(*) FROM tenure.job_events WHERE error_code = 'INVALID_ROW'")
        assert events == [(4,)]
        await conn.execute(
            "INSERT INTO tenure.jobs (queue, task, unique_key, unique_states)"
            " VALUES ('q', 'billing.refund', 'billing.refund:k', '{scheduled,pending,running}')"
        )


async def test_workers_run_on_the_oldest_schema_they_accept_and_through_the_upgrade(
    empty_dsn: str,
) -> None:
    """A worker starts on a schema at the oldest version it runs on, jobs go on being enqueued and
    run while `migrate` upgrades it to the last version, and every job succeeds once."""
    from _inprocess import running

    from tenure.db.migrate import WORKER_SCHEMA_FLOOR

    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "tenure", up_to=WORKER_SCHEMA_FLOOR)
        app = tenure.Tenure(empty_dsn)
        ran: list[int] = []

        @app.task(name="upgrade.job")
        def job(ctx: tenure.JobContext, n: int) -> None:
            ran.append(n)

        async with running(app, concurrency=4):
            for n in range(20):
                await app.enqueue(job, {"n": n})
            upgrading = asyncio.create_task(migrate(conn, "tenure"))
            for n in range(20, 60):
                await app.enqueue(job, {"n": n})
                await asyncio.sleep(0.01)
            report = await upgrading
            assert report.applied == [v for v in ALL_VERSIONS if v > WORKER_SCHEMA_FLOOR]
            for _ in range(400):
                done = await fetch(conn, "SELECT count(*) FROM tenure.jobs WHERE state = 'succeeded'")
                if done == [(60,)]:
                    break
                await asyncio.sleep(0.05)
        assert sorted(ran) == list(range(60))


async def test_the_upgrade_to_chosen_keys_keeps_every_stored_key_unique_and_skips_generated_ones(
    empty_dsn: str,
) -> None:
    """0022 and 0023 on a schema with jobs: the stored (version 4) keys stay unique, a job inserted
    without a key gets a generated version 8 key outside the index, and a schedule's key (version
    5) is refused a second time through the new index."""
    async with await AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, "tenure", fresh_snapshot=False, up_to=BEFORE_CHOSEN_KEYS - 1)
        await conn.execute(
            "INSERT INTO tenure.jobs (queue, task) SELECT 'q', 't' FROM generate_series(1, 20)"
        )
        assert (await migrate(conn, "tenure", up_to=BEFORE_CHOSEN_KEYS + 1)).applied == [22, 23]
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "INSERT INTO tenure.jobs (queue, task, idempotency_key) "
                "SELECT 'q', 't', idempotency_key FROM tenure.jobs ORDER BY id LIMIT 1"
            )
        fresh = await fetch(
            conn,
            "INSERT INTO tenure.jobs (queue, task) VALUES ('q', 't') "
            "RETURNING substr(idempotency_key::text, 15, 1)",
        )
        assert fresh == [("8",)]
        chosen = "00000000-0000-5000-8000-000000000005"
        insert = "INSERT INTO tenure.jobs (queue, task, idempotency_key) VALUES ('q', 't', %s)"
        await conn.execute(insert, (chosen,))
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(insert, (chosen,))
        names = await fetch(
            conn,
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'tenure' AND c.relname LIKE '%%idempotency%%' AND i.indisvalid",
        )
        assert names == [("jobs_chosen_idempotency_key_idx",)]

"""Versioned, idempotent migrations, safe when several processes run them at once, and online:
no statement of an upgrade holds a lock that stops enqueues, claims or completions for longer
than LOCK_TIMEOUT while it waits, and none scans or rewrites `jobs` under such a lock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from tenure.db.migrate_hint import migrate_hint
from tenure.db.pooler import behind_pooler
from tenure.db.sqlfiles import migration_files, named_queries, plain_queries, quote_schema, schema_file
from tenure.model.errors import ConfigurationError, MigrationFailed, SchemaNotMigrated

log = logging.getLogger("tenure.migrate")


@dataclass(frozen=True)
class MigrationReport:
    schema: str
    applied: list[int]
    current: int


#: First line of a migration that must run outside a transaction (CREATE INDEX CONCURRENTLY).
#: Its statements run one at a time, in autocommit; each must be safe to run again, because a
#: failure part-way leaves the earlier ones done and the version unrecorded.
NO_TRANSACTION = "-- tenure: no-transaction"
MIGRATE_BEHIND_POOLER = (
    "migrate needs a direct connection to PostgreSQL, and this one goes through a pooler (PgBouncer?): "
    "the migration lock is a session advisory lock held across many transactions, and a pooler in "
    "transaction mode lends the session to other clients in between, so the lock can be left behind "
    "and the next migrate wait for it. Give the server's own DSN with --dsn (as the workers' "
    "--listen-dsn)"
)
#: How long a waiting `tenure migrate` sleeps between tries of the lock (seconds, doubling).
LOCK_POLL = (0.02, 0.5)
#: A line that splits a migration into steps, each committed on its own (in autocommit, one
#: implicit transaction per step), with the version recorded after the last. A step that adds a
#: constraint NOT VALID, a step that backfills in batches (a DO block that COMMITs between
#: batches), a step that VALIDATEs: so that no step holds ACCESS EXCLUSIVE on a table while it
#: scans it. Each step must be safe to run again: a failure keeps the steps before it.
STEP = "-- tenure: step"
#: How long one DDL step waits for its locks before it gives up, lets the statements queued
#: behind it through, and tries again (seconds). Waiting is what stalls a queue: an ALTER TABLE
#: queued behind one long reader makes every enqueue queue behind the ALTER.
LOCK_TIMEOUT = 0.5
#: How many times a step that timed out on its lock is tried, with a growing pause in between
#: (0.1 s doubling to LOCK_RETRY_PAUSE_CAP, jittered): about two minutes of trying in all.
LOCK_TRIES = 60
LOCK_RETRY_PAUSE_CAP = 2.0


def latest_version() -> int:
    return migration_files()[-1][0]


def known_versions() -> list[int]:
    return [version for version, _, _ in migration_files()]


def statements_of(text: str) -> list[str]:
    """The statements of a no-transaction migration: split at a `;` ending a line. Such files
    hold simple DDL only: dollar quoting (function bodies, DO blocks) is refused."""
    if "$$" in text:
        raise ValueError("a no-transaction migration may not use dollar quoting; split the function out")
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [part.strip() for part in re.split(r";[ \t]*(?:\n|$)", body) if part.strip()]


async def migrate(
    conn: AsyncConnection[Any], schema: str, *, fresh_snapshot: bool = True, up_to: int | None = None
) -> MigrationReport:
    """Brings `schema` to the latest version, or to version `up_to` (an older schema, for
    upgrade tests). On an empty schema the current snapshot (schema.sql) is applied in one step
    unless `fresh_snapshot` is False or `up_to` is given.

    Each migration commits on its own with its version record, so a failure keeps what came
    before it. Concurrent callers take turns on a session advisory lock, which waiters poll
    rather than block on: a blocked waiter would hold a snapshot that a concurrent
    CREATE INDEX CONCURRENTLY waits for, a deadlock. Runs on a direct connection, outside any
    transaction: through a pooler it refuses (ConfigurationError), since the pooler may lend the
    session holding the lock to other clients between the migration's transactions.
    """
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise ConfigurationError("migrate needs a connection that is not inside a transaction")
    restore_autocommit = not conn.autocommit
    if restore_autocommit:
        await conn.set_autocommit(True)
    try:
        if await behind_pooler(conn):
            raise ConfigurationError(MIGRATE_BEHIND_POOLER)
        await _lock(conn, schema)
        unlock = named_queries(schema)["migrations_unlock"]
        try:
            applied = await _apply(conn, schema, fresh_snapshot and up_to is None, up_to)
        except BaseException:
            with contextlib.suppress(psycopg.Error):  # a lost connection has released it anyway
                await conn.execute(unlock, {"schema": schema})
            raise
        await conn.execute(unlock, {"schema": schema})
    finally:
        if restore_autocommit:
            await conn.set_autocommit(False)
    return MigrationReport(schema, applied, up_to or latest_version())


async def _lock(conn: AsyncConnection[Any], schema: str) -> None:
    query = named_queries(schema)["migrations_try_lock"]
    pause, longest = LOCK_POLL
    while True:
        row = await (await conn.execute(query, {"schema": schema})).fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(pause)
        pause = min(longest, pause * 2)


async def _apply(
    conn: AsyncConnection[Any], schema: str, fresh_snapshot: bool, up_to: int | None
) -> list[int]:
    q = named_queries(schema)
    await conn.execute(q["migrations_table_create"])
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(q["migrations_applied"])
        done = {r["version"] for r in await cur.fetchall()}
    files = [f for f in migration_files() if up_to is None or f[0] <= up_to]
    if not done and fresh_snapshot:
        async with conn.transaction():
            await conn.execute(schema_file("schema.sql", schema).encode())
            for version, name, _ in files:
                await conn.execute(q["migration_record"], {"version": version, "name": name})
        return [version for version, _, _ in files]
    applied: list[int] = []
    for version, name, path in files:
        if version in done:
            continue
        text = schema_file(path, schema)
        record = {"version": version, "name": name}
        try:
            steps = steps_of(text)
            if steps is None:
                await _with_lock_retries(conn, text, record=(q["migration_record"], record))
            else:
                for step in steps:
                    await _with_lock_retries(conn, step)
                await conn.execute(q["migration_record"], record)
        except psycopg.Error as exc:
            raise MigrationFailed(version, name, exc, applied) from exc
        applied.append(version)
    return applied


def steps_of(text: str) -> list[str] | None:
    """The steps of a migration committed one at a time, or None for a migration that is one
    transaction with its version record."""
    if text.startswith(NO_TRANSACTION):
        return statements_of(text)
    if re.search(rf"^{re.escape(STEP)}\s*$", text, re.MULTILINE):
        parts = re.split(rf"^{re.escape(STEP)}\s*$", text, flags=re.MULTILINE)
        return [part.strip() for part in parts if _has_statement(part)]
    return None


def _has_statement(part: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("--") for line in part.splitlines())


async def _with_lock_retries(
    conn: AsyncConnection[Any], text: str, *, record: tuple[str, dict[str, Any]] | None = None
) -> None:
    """Runs `text` (with the version `record`, in one transaction, when given) under a lock
    timeout, trying again after a pause each time the timeout ends the wait. Statements that
    build or drop an index CONCURRENTLY run without it: they block no writer while they wait, and
    one cut short leaves an invalid index behind that the statement cannot simply be run over."""
    bounded = "CONCURRENTLY" not in text
    pause = 0.1
    for attempt in range(1, LOCK_TRIES + 1):
        try:
            if record is None:
                if bounded:
                    await conn.execute(plain_queries()["lock_timeout_set"], {"timeout": f"{LOCK_TIMEOUT}s"})
                try:
                    await conn.execute(text.encode())
                finally:
                    if bounded:
                        await conn.execute(plain_queries()["lock_timeout_reset"])
            else:
                async with conn.transaction():
                    await conn.execute(
                        plain_queries()["lock_timeout_set_local"], {"timeout": f"{LOCK_TIMEOUT}s"}
                    )
                    await conn.execute(text.encode())
                    await conn.execute(record[0], record[1])
            return
        except psycopg.errors.LockNotAvailable:
            if not bounded or attempt == LOCK_TRIES:
                raise
            log.info(
                "a migration step waited %.1fs for a lock held elsewhere (a long transaction?): "
                "trying again, %s of %s",
                LOCK_TIMEOUT,
                attempt,
                LOCK_TRIES,
            )
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(LOCK_RETRY_PAUSE_CAP, pause * 2)


async def applied_versions(conn: AsyncConnection[Any], schema: str) -> list[int]:
    """The migrations recorded in `schema`, in order; empty when it was never migrated."""
    table = f"{quote_schema(schema)}.schema_migrations"
    q = named_queries(schema)
    async with conn.cursor() as cur:
        await cur.execute(q["migrations_table_exists"], {"table": table})
        row = await cur.fetchone()
        if not row or not row[0]:
            return []
        await cur.execute(q["migrations_applied"])
        return [r[0] for r in await cur.fetchall()]


async def schema_version(conn: AsyncConnection[Any], schema: str) -> int | None:
    """The latest applied migration, or None when the schema was never migrated."""
    versions = await applied_versions(conn, schema)
    return max(versions) if versions else None


#: The oldest schema a worker of this code runs on. The migrations after it add guards (bounds),
#: operator records and the SQL way in, which a worker does without until they are applied: so
#: `tenure migrate` can upgrade a schema while this version's workers run on it
#: (docs/operations.md, "Upgrading"). Raise it when a migration adds what the worker's own
#: statements use.
WORKER_SCHEMA_FLOOR = 14


async def require_current_schema(
    conn: AsyncConnection[Any], schema: str, *, floor: int | None = None
) -> None:
    """Refuses to run on a schema that was never migrated or is behind this code: it must have
    every migration, or with `floor` every one up to that version."""
    try:
        version = await schema_version(conn, schema)
    except psycopg.errors.InsufficientPrivilege:
        return  # a least-privilege role may not read the migrations table; queries will tell
    if version is None:
        raise SchemaNotMigrated(
            f"the Tenure schema {schema!r} does not exist in this database: {migrate_hint(schema)} first"
        )
    needed = {v for v in known_versions() if floor is None or v <= floor}
    missing = sorted(needed - set(await applied_versions(conn, schema)))
    if missing:
        raise SchemaNotMigrated(
            f"the Tenure schema {schema!r} lacks migrations {missing} that this code needs: "
            f"{migrate_hint(schema)} to upgrade it"
        )

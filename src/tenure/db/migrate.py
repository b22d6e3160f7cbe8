"""Versioned, idempotent migrations (S4), safe when several processes run them at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tenure.db._sqlfiles import migration_files, named_queries, quote_schema, schema_file
from tenure.errors import ConfigurationError, SchemaNotMigrated


@dataclass(frozen=True)
class MigrationReport:
    schema: str
    applied: list[int]
    current: int


def latest_version() -> int:
    return migration_files()[-1][0]


async def migrate(conn: AsyncConnection[Any], schema: str, *, fresh_snapshot: bool = True) -> MigrationReport:
    """Brings `schema` to the latest version. On an empty schema the current snapshot
    (schema.sql) is applied in one step unless `fresh_snapshot` is False.

    Each numbered migration runs and commits in a transaction of its own: PostgreSQL refuses to
    use an enum value in the transaction that added it, so a migration that adds one (0004) must
    be committed before the next one can use it. `conn` must therefore not be inside a
    transaction. Each transaction takes the migration lock and re-reads what is applied, so
    concurrent runs still apply every version exactly once."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ConfigurationError(
            "migrate() needs a connection outside any transaction (each migration commits on its own): "
            "pass an autocommit connection, or commit first"
        )
    q = named_queries(schema)
    applied_now: list[int] = []
    files = migration_files()
    async with conn.transaction():
        done = await _locked_applied(conn, schema, q)
        if not done and fresh_snapshot:
            await conn.execute(schema_file("schema.sql", schema).encode())
            for version, name, _ in files:
                await conn.execute(q["migration_record"], {"version": version, "name": name})
                applied_now.append(version)
            return MigrationReport(schema, applied_now, latest_version())
    for version, name, path in files:
        async with conn.transaction():
            if version in await _locked_applied(conn, schema, q):
                continue
            await conn.execute(schema_file(path, schema).encode())
            await conn.execute(q["migration_record"], {"version": version, "name": name})
            applied_now.append(version)
    return MigrationReport(schema, applied_now, latest_version())


async def _locked_applied(conn: AsyncConnection[Any], schema: str, q: dict[str, str]) -> set[int]:
    """Takes the transaction's migration lock, then reads the versions already applied."""
    await conn.execute(q["migrations_lock"], {"schema": schema})
    await conn.execute(q["migrations_table_create"])
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(q["migrations_applied"])
        return {r["version"] for r in await cur.fetchall()}


async def schema_version(conn: AsyncConnection[Any], schema: str) -> int | None:
    """The latest applied migration, or None when the schema was never migrated."""
    table = f"{quote_schema(schema)}.schema_migrations"
    q = named_queries(schema)
    async with conn.cursor() as cur:
        await cur.execute(q["migrations_table_exists"], {"table": table})
        row = await cur.fetchone()
        if not row or not row[0]:
            return None
        await cur.execute(q["migrations_applied"])
        versions = [r[0] for r in await cur.fetchall()]
    return max(versions) if versions else None


async def require_current_schema(conn: AsyncConnection[Any], schema: str) -> None:
    """Refuses to run on a schema that was never migrated or is behind this code."""
    try:
        version = await schema_version(conn, schema)
    except psycopg.errors.InsufficientPrivilege:
        return  # a least-privilege role may not read the migrations table; queries will tell
    if version is None:
        raise SchemaNotMigrated(
            f"the Tenure schema {schema!r} does not exist in this database: "
            f"run `tenure migrate --schema {schema}` (with the same --dsn) first"
        )
    if version < latest_version():
        raise SchemaNotMigrated(
            f"the Tenure schema {schema!r} is at version {version}, this code needs {latest_version()}: "
            "run `tenure migrate` to upgrade it"
        )

"""The demo's own database: dropped and created on every run, so reruns start clean."""

from __future__ import annotations

import re
from typing import Any

from psycopg import conninfo

from tenure.db.connect import connect
from tenure.db.migrate import migrate
from tenure.model.errors import ConfigurationError
from tenure.ops.demo.bank import TRANSFER, app
from tenure.ops.demo.queries import BankQueries, database_statement
from tenure.ops.demo.workload import Workload
from tenure.producer.client import Client

# The demo drops its database before every run, so it only ever touches names that are
# obviously its own: a typo must not cost someone their real database.
_DEMO_NAME = re.compile(r"tenure_demo[a-z0-9_]{0,40}")


def check_database_name(name: str) -> str:
    if not _DEMO_NAME.fullmatch(name):
        raise ConfigurationError(
            f"--database {name!r}: the demo drops and recreates this database, so its name must "
            "start with 'tenure_demo' (lowercase letters, digits, underscores)"
        )
    return name


def with_database(dsn: str, database: str) -> str:
    """The same server and credentials, another database."""
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = database
    return conninfo.make_conninfo(**params)


async def recreate_database(server_dsn: str, database: str) -> str:
    """Drops and creates `database` on the server of `server_dsn`; returns its DSN."""
    check_database_name(database)
    if conninfo.conninfo_to_dict(server_dsn).get("dbname") == database:
        raise ConfigurationError(
            f"--dsn points at {database!r} itself; give the DSN of another database on that server "
            "(e.g. postgres), the demo creates its own"
        )
    async with await connect(server_dsn) as conn:
        await conn.execute(database_statement("demo_database_drop", database))
        await conn.execute(database_statement("demo_database_create", database))
    return with_database(server_dsn, database)


async def drop_database(server_dsn: str, database: str) -> None:
    check_database_name(database)
    async with await connect(server_dsn) as conn:
        await conn.execute(database_statement("demo_database_drop", database))


async def prepare(dsn: str, schema: str, workload: Workload) -> None:
    """Migrates Tenure into the fresh database, opens the accounts and enqueues every transfer."""
    async with await connect(dsn) as conn:
        await migrate(conn, schema)
        async with conn.transaction():
            bank = BankQueries(schema)
            await bank.create_bank(conn)
            await bank.open_accounts(conn, workload.balances)
    async with Client(dsn, schema=schema, registry=app.registry) as client:
        specs = [client.builder.spec(TRANSFER, payload) for payload in workload.transfers]
        await client.enqueue_copy(specs)

"""A database of its own for a project on a server Tenure started (the embedded default): what
`tenure embedded dsn --database NAME` gives a Django or FastAPI project to point its settings at."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from psycopg import conninfo, sql

from tenure.db.connect import connect
from tenure.db.dsn_check import URI_PREFIXES
from tenure.db.sqlfiles import plain_queries
from tenure.model.errors import ConfigurationError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_database_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"--database {name!r} is not a plain database name: use letters, digits and underscores, "
            "starting with a letter, at most 63 characters (as in shop or shop_dev)"
        )
    return name


def with_database(dsn: str, database: str) -> str:
    """The same server and credentials, another database; a URI stays a URI (what settings that
    read a DATABASE_URL expect), with the database as its path."""
    if dsn.startswith(URI_PREFIXES):
        return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = database
    return conninfo.make_conninfo(**params)


async def ensure_database(server_dsn: str, database: str) -> tuple[str, bool]:
    """`database` on the server of `server_dsn`, created when it does not exist yet: its DSN, and
    whether it was created now."""
    check_database_name(database)
    queries = plain_queries()
    async with await connect(server_dsn, name="tenure-cli") as conn:
        cur = await conn.execute(queries["database_exists"], {"name": database})
        row = await cur.fetchone()
        created = not (row is not None and row[0])
        if created:
            statement = sql.SQL(queries["database_create"]).format(database=sql.Identifier(database))
            await conn.execute(statement)
    return with_database(server_dsn, database), created

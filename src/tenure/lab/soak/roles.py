"""The soak's roles: least privilege, so that revoking a grant is a real fault.

A superuser bypasses every privilege check, so workers connecting as the server's superuser
would never notice a REVOKE. The soak creates a LOGIN role with `tenure roles`' worker GRANTs
(plus the bank's tables) and runs every worker as it; a second LOGIN role gets the producer's
GRANTs (enqueue() alone), and the faults that write rows as a producer would use it. Both are
dropped at the end. On PostgreSQL 17 and later the worker role may also MAINTAIN `jobs`, so the
workers vacuum it themselves under every fault.

The soak starts its schema at the oldest version workers run on and upgrades it mid-run, and
`tenure roles`' GRANTs name what the later migrations add (the task catalog, enqueue()). So on an
older schema each statement is applied on its own and the ones naming a table or function the
schema lacks wait for the upgrade, which grants them all again; on the latest schema they are
applied as one, and any failure is an error.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection, conninfo, sql

from tenure.db.migrate import latest_version, schema_version, statements_of
from tenure.db.sqlfiles import package_queries
from tenure.security.roles import Role, grants

#: What a statement meets on a schema older than the one it was written for: a table or function
#: a later migration adds.
NOT_YET = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction)
#: The first server version with the MAINTAIN privilege, which lets the workers vacuum `jobs`.
MAINTAIN_SINCE = 170000


def _statement(name: str, **identifiers: str) -> sql.Composed:
    return sql.SQL(package_queries("tenure.lab.soak")[name]).format(
        **{k: sql.Identifier(v) for k, v in identifiers.items()}
    )


class SoakRole:
    def __init__(self, name: str, schema: str, kind: Role = Role.WORKER) -> None:
        self.name = name
        self.schema = schema
        self.kind = kind
        #: The GRANT statements left out at the last grant, for want of what they name.
        self.waiting: list[str] = []

    def dsn(self, dsn: str) -> str:
        """`dsn` connecting as this role instead (the soak's servers trust local connections)."""
        params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
        params["user"] = self.name
        params.pop("password", None)
        return conninfo.make_conninfo(**params)

    async def create(self, conn: AsyncConnection[Any]) -> None:
        await self.drop(conn)
        await conn.execute(_statement("soak_role_create", role=self.name))
        await self.grant(conn)

    async def grant(self, conn: AsyncConnection[Any]) -> None:
        """The role's GRANTs (again, after a revoke or an upgrade) that fit the schema as it is
        now; a worker gets the bank's too. `conn` is in autocommit."""
        text = grants(self.kind, self.name, self.schema)
        if await schema_version(conn, self.schema) == latest_version():
            await conn.execute(text.encode())
            self.waiting = []
        else:
            self.waiting = []
            for statement in statements_of(text):
                try:
                    await conn.execute(statement.encode())
                except NOT_YET:
                    self.waiting.append(" ".join(statement.split()))
        if self.kind is Role.WORKER:
            await conn.execute(_statement("soak_role_bank_grants", role=self.name))
            if conn.info.server_version >= MAINTAIN_SINCE:
                await conn.execute(_statement("soak_role_maintain", role=self.name, schema=self.schema))

    async def revoke_update(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(_statement("soak_role_revoke_update", role=self.name, schema=self.schema))

    async def drop(self, conn: AsyncConnection[Any]) -> None:
        found = await conn.execute(
            package_queries("tenure.lab.soak")["soak_role_exists"].encode(), {"name": self.name}
        )
        row = await found.fetchone()
        if row and row[0]:
            await conn.execute(_statement("soak_role_drop", role=self.name))


async def set_read_only(conn: AsyncConnection[Any], database: str, read_only: bool) -> None:
    """New sessions of `database` get read-only transactions (as on a standby), or not."""
    name = "soak_database_read_only" if read_only else "soak_database_writable"
    await conn.execute(_statement(name, database=database))

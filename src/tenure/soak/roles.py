"""The soak's worker role: least privilege, so that revoking its UPDATE grant is a real fault.

A superuser bypasses every privilege check, so workers connecting as the server's superuser
would never notice a REVOKE. The soak creates a LOGIN role with `tenure roles`' worker GRANTs
(plus the bank's tables), runs every worker as it, and drops it at the end.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, conninfo, sql

from tenure.security.roles import Role, grants
from tenure.soak.queries import _sections


def _statement(name: str, **identifiers: str) -> sql.Composed:
    return sql.SQL(_sections()[name]).format(**{k: sql.Identifier(v) for k, v in identifiers.items()})


class SoakRole:
    def __init__(self, name: str, schema: str) -> None:
        self.name = name
        self.schema = schema

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
        """The worker's GRANTs (again, after a revoke), and the bank's."""
        await conn.execute(grants(Role.WORKER, self.name, self.schema).encode())
        await conn.execute(_statement("soak_role_bank_grants", role=self.name))

    async def revoke_update(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(_statement("soak_role_revoke_update", role=self.name, schema=self.schema))

    async def drop(self, conn: AsyncConnection[Any]) -> None:
        found = await conn.execute(_sections()["soak_role_exists"].encode(), {"name": self.name})
        row = await found.fetchone()
        if row and row[0]:
            await conn.execute(_statement("soak_role_drop", role=self.name))


async def set_read_only(conn: AsyncConnection[Any], database: str, read_only: bool) -> None:
    """New sessions of `database` get read-only transactions (as on a standby), or not."""
    name = "soak_database_read_only" if read_only else "soak_database_writable"
    await conn.execute(_statement(name, database=database))

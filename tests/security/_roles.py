"""Connecting as one of Tenure's roles: the DSN of a test's database for another role."""

from __future__ import annotations

from typing import Any

from psycopg import conninfo

SCHEMA = "tenure"


def as_role(dsn: str, role: str, password: str | None = None) -> str:
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    if password:
        params["password"] = password
    return conninfo.make_conninfo(**params)

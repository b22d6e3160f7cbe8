"""The GRANTs for Tenure's roles, rendered from sql/roles.sql for one schema."""

from __future__ import annotations

import enum

from psycopg import sql

from tenure.db.sqlfiles import package_queries
from tenure.model.validation import check_schema_name


class Role(enum.StrEnum):
    PRODUCER = "producer"
    WORKER = "worker"
    ADMIN = "admin"


def _templates() -> dict[str, str]:
    return package_queries("tenure.security")


def grants(role: Role, role_name: str, schema: str) -> str:
    """The GRANT statements giving `role_name` the privileges of `role` on `schema`."""
    check_schema_name(schema)
    if not role_name or len(role_name) > 63:
        from tenure.model.errors import ConfigurationError

        raise ConfigurationError(f"role name {role_name!r} must be 1 to 63 characters")
    template = sql.SQL(_templates()[role.value])
    return template.format(schema=sql.Identifier(schema), role=sql.Identifier(role_name)).as_string(None)


def all_grants(schema: str, names: dict[Role, str]) -> str:
    """Every role's GRANTs, each under a comment naming it."""
    parts = [f"-- Tenure roles for schema {schema!r}: create the roles first (CREATE ROLE ... LOGIN)."]
    for role in Role:
        parts.append(grants(role, names[role], schema))
    return "\n\n".join(parts) + "\n"

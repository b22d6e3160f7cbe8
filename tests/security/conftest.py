"""The role tests' fixture: real PostgreSQL roles with Tenure's GRANTs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from _roles import SCHEMA

from tenure.security.roles import Role, grants


@pytest.fixture
def roles(dsn: str) -> Iterator[dict[Role, str]]:
    """Three fresh LOGIN roles with Tenure's GRANTs on this test's database; dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = {role: f"tenure_{role.value}_{tag}" for role in Role}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role, name in names.items():
            conn.execute(f'CREATE ROLE "{name}" LOGIN')
            conn.execute(grants(role, name, SCHEMA))
    yield names
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names.values():
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')

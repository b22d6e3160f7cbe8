"""Fixtures of the scale-out tests: a real PgBouncer in transaction mode in front of the pg15 test
server, a fresh database behind it for each test, and real `tenure worker` processes.

These tests run against pg15 whatever TENURE_TEST_BACKENDS says: the deployment they test is a
server of one's own behind a pooler, and the embedded server does not apply. Without a reachable
pg15 server or without the pgbouncer binary (scripts/install-system-deps.sh installs it) they
fail; nothing here is skipped.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _bouncer import Bouncer, WorkerProcesses, launch_pgbouncer  # noqa: E402

from tenure.db.migrate import migrate  # noqa: E402

PG15_DSN = os.environ.get("TENURE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "tenure"
TEMPLATE = f"tenure_tpl_scaleout_{os.getpid()}"
#: Server connections PgBouncer keeps per database: small, so a test can hold every one of them.
POOL_SIZE = 6


def with_db(dsn: str, dbname: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def _admin(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


@pytest.fixture(scope="session")
def pg15_server() -> Iterator[str]:
    """The pg15 maintenance DSN, with a migrated template database of this session on it."""
    with _admin(PG15_DSN) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")

    async def apply() -> None:
        async with await psycopg.AsyncConnection.connect(with_db(PG15_DSN, TEMPLATE), autocommit=True) as c:
            await migrate(c, SCHEMA)

    asyncio.run(apply())
    yield PG15_DSN
    with _admin(PG15_DSN) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@pytest.fixture
def dsn(pg15_server: str) -> Iterator[str]:
    """A fresh, migrated pg15 database for this test alone (the direct DSN), dropped afterwards."""
    name = f"tenure_s_{uuid.uuid4().hex[:12]}"
    with _admin(pg15_server) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    yield with_db(pg15_server, name)
    with _admin(pg15_server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def pgbouncer(pg15_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bouncer]:
    """A real PgBouncer in transaction mode on a free 127.0.0.1 port, in front of the pg15 server
    (every database name maps to it), trusting the local user; stopped at the end of the session."""
    with launch_pgbouncer(pg15_server, tmp_path_factory.mktemp("pgbouncer"), pool_size=POOL_SIZE) as bouncer:
        yield bouncer


@pytest.fixture
def pooled_dsn(dsn: str, pgbouncer: Bouncer) -> str:
    """This test's database through PgBouncer."""
    return pgbouncer.route(dsn)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Starts `tenure worker` processes of tests/scaleout/_pooled_app.py; kills any left at the end."""
    started = WorkerProcesses(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()

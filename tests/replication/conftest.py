"""Fixtures of the replication tests: private PostgreSQL 15 servers (tests/replication/_servers.py)
with Tenure's schema migrated into a database of their own."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _servers import ABSENT, LOCAL, STANDBY, Server, primary, standby, wait_for  # noqa: E402

from tenure.db.migrate import migrate  # noqa: E402


async def migrated_database(server: Server) -> str:
    """A new database on `server` with Tenure's schema; its DSN (commits wait as configured)."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server.dsn(**LOCAL), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    async with await psycopg.AsyncConnection.connect(server.dsn(name, **LOCAL), autocommit=True) as conn:
        await migrate(conn, "tenure")
    return server.dsn(name)


@pytest.fixture(scope="module")
def lonely() -> Iterator[Server]:
    """A primary whose commits wait for a synchronous standby that never connects."""
    with primary(f"synchronous_standby_names={ABSENT}") as server:
        yield server


@pytest.fixture
async def lonely_dsn(lonely: Server) -> AsyncIterator[str]:
    """A fresh migrated database on the lonely primary."""
    yield await migrated_database(lonely)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Server, Server]]:
    """A primary and a real streaming standby (`STANDBY`), asynchronous until a test names it in
    synchronous_standby_names."""
    with primary() as main, standby(main, STANDBY) as replica:
        wait_for(lambda: streaming(main), "the standby to stream")
        yield main, replica


@pytest.fixture
def synchronous_pair(pair: tuple[Server, Server]) -> Iterator[tuple[Server, Server]]:
    """The pair with its standby synchronous; asynchronous again afterwards."""
    main, _ = pair
    main.set("synchronous_standby_names", STANDBY)
    wait_for(lambda: streaming(main) == [(STANDBY, "sync")], "the standby to be synchronous")
    yield pair
    main.set("synchronous_standby_names", "")


def streaming(server: Server) -> list[tuple[str, str]]:
    """(application_name, sync_state) of each standby streaming from `server`."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT application_name, sync_state FROM pg_stat_replication").fetchall()
    return [(r[0], r[1]) for r in rows]

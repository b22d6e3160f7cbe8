"""Query tests: each runs inside one transaction on the session's shared database, rolled back when
the test ends, so a test leaves nothing behind and costs no database of its own.

Inside one transaction `now()` does not move: a test that needs time to pass injects `now=`, as
every query allows. A statement expected to fail runs in `async with db.transaction():`, a
savepoint inside the test's transaction, so the test goes on after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg import AsyncConnection


@pytest.fixture
async def db(shared_dsn: str) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection inside a transaction that is rolled back when the test ends."""
    async with await AsyncConnection.connect(shared_dsn) as conn:
        # Open the transaction now, so a query's own `conn.transaction()` is a savepoint inside it
        # and never a commit of its own.
        await conn.execute("SELECT 1")
        try:
            yield conn
        finally:
            await conn.rollback()

"""`TestSchema`: a schema of the app's database for its tests alone.

A worker reads one schema (`tenure` unless told otherwise), so jobs the tests enqueue into a
schema of their own are never seen, claimed or run by a worker of the developer's running on the
same database. The schema is created and migrated once, emptied before each test (a few
milliseconds, against some 200 for a fresh schema), and dropped at the end. Jobs the tests run
commit, as a worker's do: there is no transaction to roll back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import psycopg

from tenure.db.connect import connect, resolve_dsn
from tenure.db.migrate import migrate
from tenure.testing.queries import TestingQueries

if TYPE_CHECKING:
    from tenure.app import Tenure

#: Test schemas are named so, with the process id and a random part: a run's processes
#: (pytest-xdist) each have their own.
PREFIX = "tenure_test_"


class TestSchema:
    """A schema for `app`'s tests, on the app's database: `create()` it, then `use()` it around
    each test, and `drop()` it at the end."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    def __init__(self, app: Tenure, name: str | None = None) -> None:
        self.app = app
        self.name = name or f"{PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.queries = TestingQueries(self.name)

    @property
    def dsn(self) -> str:
        return resolve_dsn(self.app.dsn).dsn

    def create(self) -> None:
        """Creates and migrates the schema."""

        async def migrated() -> None:
            conn = await connect(self.dsn)
            async with conn:
                await migrate(conn, self.name)

        # On a loop of its own thread: the caller (a fixture) may be inside a running loop.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenure-testing-migrate") as runner:
            runner.submit(asyncio.run, migrated()).result()

    def empty(self) -> None:
        """Deletes every job, workflow, pause, limit and schedule a test left in the schema."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.queries.empty_schema(conn)

    def drop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.queries.drop_schema(conn)

    @contextlib.contextmanager
    def use(self) -> Iterator[Tenure]:
        """The app switched to this schema, emptied first; switched back afterwards. The app's
        clients made meanwhile are its own for the while: the blocking one is closed at the end,
        the async one left to the loop it was made on (tenure_inline closes it there)."""
        app = self.app
        self.empty()
        saved: tuple[str, Any, Any] = (app.schema, app._client, app._sync_client)
        app.schema, app._client, app._sync_client = self.name, None, None
        try:
            yield app
        finally:
            made = app._sync_client
            app.schema, app._client, app._sync_client = saved
            if made is not None:
                made.close()

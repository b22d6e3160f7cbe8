"""One pooled connection that a busy loop keeps from one statement to the next.

The pool lends its connections in turn, first returned first lent. A loop that checked one out
for each statement spread its statements over every connection the pool had grown to (five a
worker in a drain), and the server paid for each of them: five backends' caches and prepared
plans to warm, five processes to switch between on the same cores. The claimer and the completer,
which send a statement every few milliseconds under load, each keep one instead, and give it
back to the pool as soon as keeping it could cost anything: after an error (its state is then
unknown, and the pool checks it), when the loop has been idle a moment, after a while in any
case (so that the pool's own care of its connections still reaches it), and when the loop stops.

A kept connection's prepared statements are also dropped a few times in its first minute
(REPLAN_AT), so that PostgreSQL plans them again. A worker prepares its claim and completion as
it starts, often on a table that is empty or was last analyzed empty; on such a table a scan of
`jobs` is the cheapest plan, PostgreSQL keeps it, and as the table fills every claim would read
it whole until autovacuum analyzes `jobs` again (a minute or more). Planned again once the table
holds its jobs, the statements take their rows by primary key. Not through a pooler, whose
server sessions are not this connection's.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tenure.db.pooler import behind_pooler, drop_prepared_statements
from tenure.worker.health import describe_error

log = logging.getLogger("tenure.worker")

#: A kept connection goes back to the pool once its loop has sent nothing for this long (seconds).
IDLE_SECONDS = 1.0
#: ... and at the first statement's end past this long after it was taken (seconds).
HOLD_SECONDS = 60.0
#: When, counted from the first time a connection is kept, its prepared statements are dropped
#: to be planned again (seconds): often while a table fills from empty, then no more (after
#: that, autovacuum's analyze of the table makes PostgreSQL plan them again).
REPLAN_AT = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)

#: Per connection: when it was first kept, and how many of REPLAN_AT it has had.
_replans: weakref.WeakKeyDictionary[AsyncConnection[Any], tuple[float, int]] = weakref.WeakKeyDictionary()


class KeptConnection:
    """`use()` lends the kept connection, taking one from `pool` when none is kept, all within
    `bound` seconds (the wait for the pool and the statement, as WorkerServices.connection).
    A second use while one is under way gets a connection of the pool's own."""

    def __init__(self, pool: AsyncConnectionPool[Any], bound: float) -> None:
        self._pool = pool
        self._bound = bound
        self._conn: AsyncConnection[Any] | None = None
        self._taken_at = 0.0
        self._in_use = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._returning: set[asyncio.Task[None]] = set()
        #: Whether the pool's connections reach PostgreSQL directly; None until first asked.
        self._direct: bool | None = None

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncConnection[Any]]:
        if self._in_use:
            async with asyncio.timeout(self._bound), self._pool.connection() as conn:
                yield conn
            return
        self._in_use = True
        self._cancel_idle_timer()
        try:
            async with asyncio.timeout(self._bound):
                if self._conn is None:
                    self._conn = await self._pool.getconn()
                    self._taken_at = time.monotonic()
                try:
                    await self._replan_if_due(self._conn)
                    yield self._conn
                except BaseException:
                    await self.release()  # after a failure the pool judges the connection
                    raise
            if time.monotonic() - self._taken_at >= HOLD_SECONDS:
                await self.release()
        finally:
            self._in_use = False
            if self._conn is not None:
                self._idle_timer = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._idle)

    async def _replan_if_due(self, conn: AsyncConnection[Any]) -> None:
        """Drops `conn`'s prepared statements when the next of REPLAN_AT has come for it."""
        now = time.monotonic()
        first, done = _replans.setdefault(conn, (now, 0))
        due = bisect.bisect_right(REPLAN_AT, now - first)  # several passed while it was not kept: one
        if due <= done or conn.prepare_threshold is None:
            return
        _replans[conn] = (first, due)
        if self._direct is None:
            self._direct = not await behind_pooler(conn)
        if self._direct:
            await drop_prepared_statements(conn)

    async def release(self) -> None:
        """Gives the kept connection back to the pool, if one is kept."""
        self._cancel_idle_timer()
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.putconn(conn)

    def _idle(self) -> None:
        self._idle_timer = None
        if not self._in_use and self._conn is not None:
            task = asyncio.get_running_loop().create_task(self._release_idle())
            self._returning.add(task)
            task.add_done_callback(self._returning.discard)

    async def _release_idle(self) -> None:
        # In a task nobody awaits: a failure is said here, or it would go unheard.
        try:
            await self.release()
        except Exception as exc:
            log.warning("could not give an idle kept connection back to its pool: %s", describe_error(exc))

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

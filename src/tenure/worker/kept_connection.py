"""One pooled connection that a busy loop keeps from one statement to the next.

The pool lends its connections in turn, first returned first lent. A loop that checked one out
for each statement spread its statements over every connection the pool had grown to (five a
worker in a drain), and the server paid for each of them: five backends' caches and prepared
plans to warm, five processes to switch between on the same cores. The claimer and the completer,
which send a statement every few milliseconds under load, each keep one instead, and give it
back to the pool as soon as keeping it could cost anything: after an error (its state is then
unknown, and the pool checks it), when the loop has been idle a moment, after a while in any
case (so that the pool's own care of its connections still reaches it), and when the loop stops.

A loop's kept connection is also replaced by a new one when the jobs table has grown since its
statements were planned, looked at a few times in the loop's first minute (REPLAN_AT), so that its
statements are prepared, and planned, again. A worker prepares its claim and completion as it
starts, often on a table that is empty or was last analyzed empty; on such a table a scan of
`jobs` is the cheapest plan, PostgreSQL keeps it for the prepared statement, and as the table
fills every claim would read it whole until autovacuum analyzes `jobs` again (a minute or more).
Prepared again once the table holds its jobs, the statements take their rows by primary key.
(Dropping the statements instead, with DEALLOCATE ALL, leaves psycopg believing in them unless it
notices the command, which it does only the first time it sees its text.) A table that has not
grown keeps its connection: the plans were made for its size, and a replacement costs a new
backend, its caches and its plans (in a drain of a filled table, one run in seconds, replacing at
every look cost 6 us of worker CPU and 7 of server CPU a job).

A new backend's first statement is slow: it loads the catalog entries of every table, index and
function it touches (a claim took 5 ms first, 1 ms after). So the successor is taken and warmed,
by the loop's own `warm` statement, in the background while the old connection goes on serving,
and it takes over at the first use after it is ready: no statement of the loop waits for a
replacement (idle latency's p99 went from 4 to 8-10 ms when claims did).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor
from psycopg_pool import AsyncConnectionPool

from tenure.worker.health import describe_error
from tenure.worker.rolling_deadline import RollingDeadline

log = logging.getLogger("tenure.worker")

#: A kept connection goes back to the pool once its loop has sent nothing for this long (seconds).
IDLE_SECONDS = 1.0
#: ... and at the first statement's end past this long after it was taken (seconds).
HOLD_SECONDS = 60.0
#: When, counted from the loop's first statement, the jobs table's size is looked at, and the kept
#: connection replaced by a new one whose statements are prepared and planned again if the table has
#: grown (seconds): often while a table fills from empty, then no more (after that, autovacuum's
#: analyze of the table makes PostgreSQL plan them again).
REPLAN_AT = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: Grown: at least twice the pages it had when the statements were planned. PostgreSQL plans a
#: table of fewer than SMALL_TABLE_PAGES pages that was never vacuumed as one of that many, so
#: a table growing within them changes no plan.
GROWTH = 2
SMALL_TABLE_PAGES = 10

#: A statement that loads into a new backend's caches what the loop's own statements touch,
#: changing nothing (the claimer's claim of no jobs, the completer's completion of none).
Warm = Callable[[AsyncConnection[Any]], Awaitable[object]]
#: The jobs table's size in pages, as the server sees it now.
Pages = Callable[[AsyncConnection[Any]], Awaitable[int]]


class KeptConnection:
    """`use()` lends the kept connection, taking one from `pool` when none is kept, all within
    `bound` seconds (the wait for the pool and the statement, as WorkerServices.connection).
    A second use while one is under way gets a connection of the pool's own. `pages` tells
    whether the table has grown, and `warm` readies a replacement in the background (see the
    module's note)."""

    def __init__(self, pool: AsyncConnectionPool[Any], bound: float, warm: Warm, pages: Pages) -> None:
        self._pool = pool
        self._bound = bound
        self._warm = warm
        self._pages = pages
        #: The jobs table's pages when the kept connection's statements were planned (about: read
        #: as the loop first used it, or as its replacement was warmed).
        self._planned_pages: int | None = None
        #: The look at the table's size, then the replacement being warmed and waiting to take
        #: over, with the pages it was planned for (None: the table has not grown).
        self._successor: asyncio.Task[tuple[AsyncConnection[Any], int] | None] | None = None
        self._conn: AsyncConnection[Any] | None = None
        #: A cursor of the kept connection, made at its first use and used again (cursor_for).
        self._cursor: AsyncCursor[Any] | None = None
        self._taken_at = 0.0
        self._in_use = False
        self._idle_timer: asyncio.TimerHandle | None = None
        #: When the last use ended (monotonic): the idle timer, set once rather than at every use,
        #: gives the connection back only once this is IDLE_SECONDS old.
        self._last_used = 0.0
        self._returning: set[asyncio.Task[None]] = set()
        #: When the loop first used its kept connection, and how many of REPLAN_AT it has had.
        self._first_used: float | None = None
        self._replanned = 0
        #: The bound of each use, on one timer kept from use to use (rolling_deadline.py).
        self._deadline = RollingDeadline(bound)
        self._kept_use = _KeptUse(self)

    def use(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection[Any]]:
        """The kept connection, for one statement (or a few) of the loop's; a second use while
        one is under way gets a connection of the pool's own (_lent)."""
        if self._in_use:
            return self._lent()
        return self._kept_use

    @contextlib.asynccontextmanager
    async def _lent(self) -> AsyncIterator[AsyncConnection[Any]]:
        async with asyncio.timeout(self._bound), self._pool.connection() as conn:
            yield conn

    async def _enter(self) -> AsyncConnection[Any]:
        """The kept use's beginning: the connection, taken or replaced first if need be."""
        self._in_use = True
        self._deadline.start()
        try:
            if self._successor is not None and self._successor.done():
                await self._take_over()
            if self._conn is None:
                self._conn = await self._pool.getconn()
                self._taken_at = time.monotonic()
            # A connection that prepares nothing (through a pooler) has nothing to plan again.
            prepares = self._conn.prepare_threshold is not None
            if self._replan_due() and self._successor is None and prepares:
                self._successor = asyncio.get_running_loop().create_task(self._successor_if_grown())
            if self._planned_pages is None and prepares:
                # The loop's first use: what its statements are about to be planned for.
                self._planned_pages = await self._baseline_pages(self._conn)
            return self._conn
        except BaseException as exc:
            failure = self._deadline.end(exc)
            self._end_use()
            if failure is exc:
                raise
            assert failure is not None
            raise failure from exc

    async def _exit(self, exc: BaseException | None) -> None:
        """The kept use's end, `exc` what its block raised: after a failure the connection goes
        back for the pool to judge; after a success, once it has been kept HOLD_SECONDS."""
        failure = exc
        try:
            if exc is not None:
                await self.release()  # still within the bound, as the block was
        except BaseException as release_failed:
            failure = release_failed
        failure = self._deadline.end(failure)
        try:
            if failure is None and time.monotonic() - self._taken_at >= HOLD_SECONDS:
                await self.release()
        finally:
            self._end_use()
        if failure is not exc:
            assert failure is not None
            raise failure

    def _end_use(self) -> None:
        self._in_use = False
        if self._conn is not None:
            self._last_used = time.monotonic()
            # One timer at a time, not one made and cancelled for every statement: a loop
            # that sends a statement every few milliseconds would churn the event loop's
            # timers, and an idle worker's claim pays for each on its way to the handler.
            if self._idle_timer is None:
                self._idle_timer = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._idle)

    def cursor_for(self, conn: AsyncConnection[Any]) -> AsyncCursor[Any] | None:
        """A cursor of `conn` to use again, statement after statement, when `conn` is the kept
        connection (None for a connection of the pool's own, lent to a second use). A cursor
        made for each statement cost a dozen calls, and its type loaders looked up again, on an
        idle worker's way from a notification to its handler. Its statements' results are read
        as they come back, before anything else can use the connection; a user that closes it
        (after a large result, which it would keep until its next statement) gets a new one."""
        if conn is not self._conn:
            return None
        if self._cursor is None or self._cursor.closed or self._cursor.connection is not conn:
            self._cursor = conn.cursor()
        return self._cursor

    async def _baseline_pages(self, conn: AsyncConnection[Any]) -> int:
        """The table's pages now; 0 when they cannot be read (the loop's statement goes on: a
        table taken for empty is only replanned sooner)."""
        try:
            return await self._pages(conn)
        except psycopg.Error as exc:
            log.warning("could not read the jobs table's size for a kept connection: %s", describe_error(exc))
            return 0

    def _replan_due(self) -> bool:
        """Whether the next of REPLAN_AT has come (several passed since the last use: one)."""
        now = time.monotonic()
        if self._first_used is None:
            self._first_used = now
        due = bisect.bisect_right(REPLAN_AT, now - self._first_used)
        if due <= self._replanned:
            return False
        self._replanned = due
        return True

    async def _successor_if_grown(self) -> tuple[AsyncConnection[Any], int] | None:
        """A connection of the pool's, its caches loaded by the loop's warm statement, if the table
        has grown since the kept connection's statements were planned (with its pages now)."""
        async with asyncio.timeout(self._bound):
            conn: AsyncConnection[Any] = await self._pool.getconn()
            try:
                pages = await self._pages(conn)
                if pages < GROWTH * max(self._planned_pages or 0, SMALL_TABLE_PAGES):
                    await self._pool.putconn(conn)
                    return None
                await self._warm(conn)
            except BaseException:
                await self._pool.putconn(conn)  # the pool judges it
                raise
        return conn, pages

    async def _take_over(self) -> None:
        """Puts a ready successor in the kept connection's place; one that failed is dropped
        (the old connection goes on serving, and the next replan time tries again)."""
        successor = self._successor
        if successor is None or not successor.done():
            return
        self._successor = None
        if successor.cancelled():
            return
        if (exc := successor.exception()) is not None:
            log.warning(
                "could not size the jobs table or warm a replacement for a kept connection: %s",
                describe_error(exc),
            )
            return
        if (ready := successor.result()) is None:
            return  # the table has not grown: the plans are the table's
        await self._replace()
        self._conn, self._planned_pages = ready
        self._taken_at = time.monotonic()

    async def _drop_successor(self) -> None:
        successor, self._successor = self._successor, None
        if successor is None:
            return
        successor.cancel()
        await asyncio.wait([successor])  # a cancellation of this caller's own still propagates
        if not successor.cancelled() and successor.exception() is None and (ready := successor.result()):
            await self._pool.putconn(ready[0])

    async def _replace(self) -> None:
        """Gives the kept connection back as one past its lifetime, which the pool closes and
        replaces (quietly: a closed connection given back is logged as a warning): the next one
        taken prepares its statements afresh."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn._expire_at = 0.0  # the pool's own max_lifetime mark, read as the connection returns
            await self._pool.putconn(conn)

    async def release(self) -> None:
        """Gives the kept connection back to the pool, if one is kept, and any successor."""
        self._cancel_idle_timer()
        # Taken before anything is awaited: a use that begins meanwhile takes a connection anew.
        conn, self._conn = self._conn, None
        await self._drop_successor()
        if conn is not None:
            await self._pool.putconn(conn)

    def _idle(self) -> None:
        self._idle_timer = None
        if self._in_use or self._conn is None:
            return  # a use under way sets the timer again as it ends
        if (wait := self._last_used + IDLE_SECONDS - time.monotonic()) > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(wait, self._idle)
            return
        task = asyncio.get_running_loop().create_task(self._release_idle())
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)

    async def _release_idle(self) -> None:
        if self._in_use:
            # A use began between the timer and this task: the connection is in use, not idle
            # (given back now, the pool would close it under that use's statement).
            return
        # In a task nobody awaits: a failure is said here, or it would go unheard.
        try:
            await self.release()
        except Exception as exc:
            log.warning("could not give an idle kept connection back to its pool: %s", describe_error(exc))

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


class _KeptUse:
    """KeptConnection.use()'s block, made once and used for each use in turn: a class's context,
    where a generator's cost a dozen calls more at each of the loop's statements."""

    __slots__ = ("_kept",)

    def __init__(self, kept: KeptConnection) -> None:
        self._kept = kept

    async def __aenter__(self) -> AsyncConnection[Any]:
        return await self._kept._enter()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        await self._kept._exit(exc)

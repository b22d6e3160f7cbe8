"""Whether connections go through a transaction pooler, and whether it keeps prepared statements.

psycopg prepares a statement on the server after `prepare_threshold` runs on a connection and
names it `_pg3_<n>`, counting per client connection. Through PgBouncer in transaction mode each
transaction may run on another server session. A pooler that does not carry prepared statements
(PgBouncer before 1.21, or a later one with max_prepared_statements = 0) lets a later run land
on a session where the name is missing ("does not exist"), taken ("already exists"), or, worst,
bound to another client's statement of the same name, which then runs with this one's parameters.

So before a pool that prepares statements opens, `check_prepared_statements` looks: a pooler is
there when the server session's pg_backend_pid() differs from the pid the connection's startup
reported (a pooler answers the startup with a cancel key of its own). Then a probe prepares one
statement, holds the server session that has it with a second connection, and runs the statement
again, which must now land on another session: an error or a foreign answer proves the pooler
does not carry it. When no second connection reaches that session (a pooler in session mode,
where prepared statements work, or one whose sessions are all busy), the probe cannot tell, and
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tenure.db.sqlfiles import plain_queries
from tenure.model.errors import DatabaseUnavailable

log = logging.getLogger("tenure.db")

#: Connections the probe may open to catch the server session that has its statement.
PROBE_HOLDERS = 4
#: How long the probe may take in all before it gives up (seconds).
PROBE_TIMEOUT = 5.0
#: What a run of a prepared statement on a server session without it fails with: the name is
#: missing (26000), or another client's statement of that name takes other parameters (08P01).
_LOST = frozenset({"26000", "08P01"})
#: A statement prepared on a session that has another client's statement of that name.
_TAKEN = "42P05"
#: psycopg's names for the statements it prepares.
_PSYCOPG_NAME = '"_pg3_'

Opener = Callable[[bool], Awaitable[AsyncConnection[Any]]]


def prepared_statements_lost(where: str) -> str:
    """The message for a pooler proven not to carry prepared statements: the problem, the fix."""
    return (
        f"connections to {where} go through a pooler that does not keep prepared statements "
        "between transactions (PgBouncer in transaction mode before 1.21, or with "
        "max_prepared_statements = 0): a statement psycopg prepares there would run on server "
        "sessions that lack it, or have another client's under its name. Turn server-side prepared "
        "statements off with --prepare-threshold none (or TENURE_PREPARE_THRESHOLD=none), or run "
        "PgBouncer 1.22.1 or later with max_prepared_statements > 0"
    )


def is_lost_prepared_statement(exc: BaseException) -> bool:
    """Whether `exc` is a statement psycopg prepared that the server session no longer has (or
    has under another client's name): proof of a pooler that does not carry prepared statements."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in (_LOST | {_TAKEN}) and _PSYCOPG_NAME in str(exc)


async def _backend_pid(conn: AsyncConnection[Any]) -> int:
    row = await (await conn.execute(plain_queries()["backend_pid"], prepare=False)).fetchone()
    assert row is not None
    return int(row[0])


def behind_pooler_sync(conn: psycopg.Connection[Any]) -> bool:
    """Blocking `behind_pooler`."""
    row = conn.execute(plain_queries()["backend_pid"], prepare=False).fetchone()
    assert row is not None
    return int(row[0]) != conn.info.backend_pid


async def behind_pooler(conn: AsyncConnection[Any]) -> bool:
    """Whether `conn` reaches PostgreSQL through a pooler (or another proxy that answers the
    startup itself): its server session is not the one its startup reported."""
    return await _backend_pid(conn) != conn.info.backend_pid


async def prepared_statements_carried(open_connection: Opener) -> bool | None:
    """True when a statement prepared in one transaction still runs, as itself, in a later one on
    another server session; False when it does not; None when the probe could not tell.

    `open_connection(autocommit)` opens a connection through the pooler.
    """
    prober = await open_connection(True)
    holders: list[AsyncConnection[Any]] = []
    try:
        return await _probe(prober, holders, open_connection)
    finally:
        for conn in (*holders, prober):
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()  # a holder's transaction: its session goes back to the pool
                await conn.close()


async def _probe(
    prober: AsyncConnection[Any], holders: list[AsyncConnection[Any]], open_connection: Opener
) -> bool | None:
    nonce = uuid.uuid4().hex  # hex digits only: safe inside the statement's text
    query = plain_queries()["prepared_statement_probe"].replace("__probe_nonce__", nonce)
    params = {"marker": uuid.uuid4().hex}
    prober.prepare_threshold = 0  # the probe is about prepared statements, whatever the pool's
    try:
        first = await (await prober.execute(query, params, prepare=True)).fetchone()
    except psycopg.Error as exc:
        if exc.sqlstate == _TAKEN:  # the session has another client's statement of that name
            return False
        raise
    assert first is not None
    session = int(first[0])
    for _ in range(PROBE_HOLDERS):
        # A holder's open transaction keeps its server session from anyone else.
        holders.append(await open_connection(False))
        if await _backend_pid(holders[-1]) == session:
            break
    else:
        return None  # session pooling, or the session that has the statement stayed busy elsewhere
    try:
        again = await (await prober.execute(query, params, prepare=True)).fetchone()
    except psycopg.Error as exc:
        if exc.sqlstate in _LOST or (exc.sqlstate or "").startswith("22"):
            return False  # missing, or another client's statement refusing these parameters
        raise
    assert again is not None
    if (again[1], again[2]) != (params["marker"], nonce):
        return False  # another client's statement, or an earlier probe's, ran in place of this one
    if int(again[0]) == session:
        return None  # it did not move to another session after all
    return True


async def check_prepared_statements(
    conn: AsyncConnection[Any], open_connection: Opener, threshold: int | None, where: str
) -> int | None:
    """The prepared-statement threshold a pool of connections like `conn` may use: `threshold`
    on a direct connection, or behind a pooler the probe proved carries prepared statements between
    transactions; None (no prepared statements) behind any other pooler, which is said once in the
    log, so that running behind PgBouncer needs no setting.

    Costs one statement on a direct connection (and nothing when `threshold` is None); behind a
    pooler, the probe of `prepared_statements_carried`.
    """
    if threshold is None or not await behind_pooler(conn):
        return threshold
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            carried = await prepared_statements_carried(open_connection)
    except (TimeoutError, psycopg.Error, DatabaseUnavailable) as exc:
        carried, reason = None, f"the probe failed: {exc or type(exc).__name__}"
    else:
        reason = (
            "it does not keep them between transactions"
            if carried is False
            else "no other connection reached the session with the probe's statement (session "
            "pooling, or busy sessions), so whether it keeps them could not be told"
        )
    if carried:
        return threshold
    _say_once(
        where,
        "connections to %s go through a pooler and Tenure prepares no statements there: %s. "
        "PgBouncer 1.22.1 or later with max_prepared_statements > 0 in transaction mode carries them",
        reason,
    )
    return None


#: The databases already told about in the log: one line each per process, not one per pool.
_TOLD: set[str] = set()


def _say_once(where: str, message: str, *details: object) -> None:
    if where not in _TOLD:
        _TOLD.add(where)
        log.warning(message, where, *details)

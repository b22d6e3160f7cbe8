"""Finding the database (flag, environment, embedded default) and opening pools on it."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import conninfo

from tenure.db.adapters import use_tenure_adapters
from tenure.db.dsn_check import dsn_problem
from tenure.db.embedded import default_data_dir, start_embedded
from tenure.db.pooler import check_prepared_statements
from tenure.model.errors import ConfigurationError, DatabaseUnavailable

DSN_ENV = "TENURE_DSN"
LISTEN_DSN_ENV = "TENURE_LISTEN_DSN"
PREPARE_THRESHOLD_ENV = "TENURE_PREPARE_THRESHOLD"
#: psycopg's default: a statement is prepared on the server after this many runs.
DEFAULT_PREPARE_THRESHOLD = 5


def parse_prepare_threshold(text: str) -> int | None:
    """`none`/`off` (never prepare: PgBouncer before 1.22.1 in transaction mode) or a count >= 0."""
    value = text.strip().lower()
    if value in ("none", "off", "never"):
        return None
    if value.isdigit():
        return int(value)
    raise ConfigurationError(
        f"prepare threshold {text!r} is not valid: give a number of runs (0 prepares at once, "
        f"{DEFAULT_PREPARE_THRESHOLD} is the default) or 'none' to never prepare statements "
        "(needed behind PgBouncer before 1.22.1 in transaction mode)"
    )


def prepare_threshold() -> int | None:
    """The prepared-statement threshold for every Tenure connection: $TENURE_PREPARE_THRESHOLD
    (set by `--prepare-threshold`), else psycopg's default."""
    text = os.environ.get(PREPARE_THRESHOLD_ENV)
    return DEFAULT_PREPARE_THRESHOLD if text is None else parse_prepare_threshold(text)


@dataclass(frozen=True)
class ResolvedDsn:
    dsn: str
    embedded: bool
    data_dir: str | None = None


def resolve_dsn(dsn: str | None = None) -> ResolvedDsn:
    """An explicit DSN, else $TENURE_DSN, else the embedded server (started if needed)."""
    chosen = dsn or os.environ.get(DSN_ENV)
    if chosen:
        problem = dsn_problem(chosen)
        if problem is not None:
            raise DatabaseUnavailable(problem if dsn else f"{problem} (in ${DSN_ENV})")
        return ResolvedDsn(chosen, embedded=False)
    data_dir = default_data_dir()
    return ResolvedDsn(start_embedded(data_dir), embedded=True, data_dir=str(data_dir))


def describe_dsn(dsn: str) -> str:
    """The DSN without its password, safe for logs and error messages."""
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except (psycopg.ProgrammingError, UnicodeError):
        return "<unparseable DSN>"
    parts.pop("password", None)
    host = str(parts.get("host") or "localhost")
    port = str(parts.get("port") or "5432")
    user = str(parts.get("user") or "")
    db = str(parts.get("dbname") or "")
    return f"{user + '@' if user else ''}{host}:{port}/{db}"


def unavailable(dsn: str, exc: BaseException) -> DatabaseUnavailable:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {reason}. "
        f"Check that the server runs and the DSN (--dsn or {DSN_ENV}) is right, "
        "or leave both unset to use the embedded server"
    )


def is_connection_lost(exc: BaseException) -> bool:
    """The connection failed under a statement: the server went away, or the client and the
    server no longer agree on what was said (psycopg's error without a SQLSTATE, as a pooler
    gives when the server behind it restarts in the middle of a transaction)."""
    if isinstance(exc, psycopg.OperationalError):
        return True
    return isinstance(exc, psycopg.InternalError) and exc.sqlstate is None


def connection_lost(dsn: str, exc: BaseException) -> DatabaseUnavailable:
    """The error for a connection lost under a statement: what was being committed may or may
    not have landed, which the caller needs to know before it sends the same work again."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DatabaseUnavailable(
        f"lost the connection to PostgreSQL at {describe_dsn(dsn)}: {reason}. A commit under "
        "way may or may not have landed: retry writes with an idempotency key to be sure of one "
        "copy"
    )


def application_name(dsn: str, name: str) -> dict[str, Any]:
    """`application_name` for a connection, unless the DSN sets its own: it is how the
    connections-in-use metric (pg_stat_activity) tells Tenure's sessions apart."""
    try:
        given = conninfo.conninfo_to_dict(dsn).get("application_name")
    except psycopg.ProgrammingError:
        given = None
    return {} if given else {"application_name": name[:63]}


async def connect(
    dsn: str, *, autocommit: bool = True, timeout: float = 10.0, name: str = "tenure"
) -> psycopg.AsyncConnection[Any]:
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn,
            autocommit=autocommit,
            connect_timeout=int(timeout),
            prepare_threshold=prepare_threshold(),
            **application_name(dsn, name),
        )
    except psycopg.OperationalError as exc:
        raise unavailable(dsn, exc) from None
    use_tenure_adapters(conn)
    return conn


async def check_before_pool(dsn: str, threshold: int | None, *, timeout: float, name: str) -> int | None:
    """What every pool checks before it opens: one direct attempt, so that an unreachable server
    fails at once instead of after the pool has retried in the background for the whole timeout;
    and, on it, whether a pool may prepare statements there. Returns the prepared-statement
    threshold the pool uses: `threshold`, or None through a pooler that loses prepared statements."""
    probe = await connect(dsn, timeout=timeout, name=name)
    try:

        async def reconnect(autocommit: bool) -> psycopg.AsyncConnection[Any]:
            return await connect(dsn, autocommit=autocommit, timeout=timeout, name=f"{name}-probe")

        return await check_prepared_statements(probe, reconnect, threshold, describe_dsn(dsn))
    finally:
        await probe.close()


def check_before_pool_sync(dsn: str, threshold: int | None, *, timeout: float, name: str) -> int | None:
    """`check_before_pool` for a blocking pool, on an event loop of its own thread (the caller's
    may be running one already)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenure-pool-check") as runner:
        check = check_before_pool(dsn, threshold, timeout=timeout, name=name)
        return runner.submit(asyncio.run, check).result()

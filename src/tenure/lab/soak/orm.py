"""A thread handler on a long-lived connection of its own, as a Django view's ORM keeps one.

Django opens one connection per thread and keeps it across requests; a worker's handler threads
serve no requests, so the Django contrib closes, around each thread handler, a connection that
has become unusable (tenure.contrib.django.connections). The soak stands that pattern up without
Django: each handler thread keeps one psycopg connection, named by its worker's id and ORM_SUFFIX
so that a fault can find it, and a hook registered with `around_thread_handlers` discards it
once it is broken. A fault then kills those connections: a job that meets the dead connection
fails once and is retried, and the thread's next job connects afresh. Without the hook every later
job of the thread would fail on the same dead connection. Each time a handler meets a dead
connection, the worker's `.orm` file gets a line naming it (its server process id): the check is
that no connection was met dead twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

from tenure.db.connect import DSN_ENV, LISTEN_DSN_ENV
from tenure.db.sqlfiles import package_queries
from tenure.lab.soak.attempts import ATTEMPTS_ENV, host_clock

#: Appended to the worker's application_name on the handlers' own connections.
ORM_SUFFIX = "/orm"
CONNECT_TIMEOUT = 5
#: Beside the worker's attempts file: one line per dead connection a handler met.
DEAD_SUFFIX = ".orm"

_local = threading.local()
_writing = threading.Lock()


def _dsn() -> str:
    # The direct DSN where there is one: behind PgBouncer the worker's own DSN is the pooler's,
    # whose server sessions are not the ORM's to be found by name.
    params: dict[str, Any] = conninfo.conninfo_to_dict(os.environ.get(LISTEN_DSN_ENV) or os.environ[DSN_ENV])
    params["application_name"] = f"{params.get('application_name') or 'soak'}{ORM_SUFFIX}"
    params["connect_timeout"] = CONNECT_TIMEOUT
    return conninfo.make_conninfo(**params)


def connection() -> psycopg.Connection[Any]:
    """This thread's connection, opened on first use and kept for the thread's later jobs."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None:
        conn = psycopg.connect(_dsn(), autocommit=True)
        _local.conn = conn
        _local.pid = conn.info.backend_pid
    return conn


def _met_dead(pid: int) -> None:
    path = os.environ.get(ATTEMPTS_ENV)
    if not path:
        return
    with _writing, open(path + DEAD_SUFFIX, "a", encoding="utf-8") as f:
        f.write(json.dumps({"pid": pid, "at": host_clock()}) + "\n")


def _discard_if_unusable() -> None:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is not None and (conn.closed or conn.broken):
        with contextlib.suppress(psycopg.Error):
            conn.close()
        _local.conn = None


@contextlib.contextmanager
def fresh_connections() -> Iterator[None]:
    """Entered around each thread handler, in its thread: a connection known broken is dropped
    before the handler, so it never starts on one, and after it, so the one its error broke does
    not wait for the thread's next job."""
    _discard_if_unusable()
    try:
        yield
    finally:
        _discard_if_unusable()


def read_balance(account: int) -> int:
    conn = connection()
    try:
        row = conn.execute(
            package_queries("tenure.lab.soak")["soak_account_balance"].encode(), {"id": account}
        ).fetchone()
    except (psycopg.OperationalError, psycopg.InterfaceError):
        if conn.broken or conn.closed:
            _met_dead(_local.pid)
        raise
    return int(row[0]) if row else 0


def dead_met(run_dir: Path) -> Counter[tuple[str, int]]:
    """How many times a handler met each dead connection, by worker file and server process."""
    met: Counter[tuple[str, int]] = Counter()
    for path in run_dir.glob(f"*{DEAD_SUFFIX}"):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError):
                met[(path.name, int(json.loads(line)["pid"]))] += 1
    return met

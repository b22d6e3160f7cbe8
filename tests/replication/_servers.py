"""Private PostgreSQL 15 servers for the replication tests: a primary whose synchronous standby
never comes (every commit waits for it, and cancelling the wait yields PostgreSQL's "might not
have been replicated" WARNING), and a real streaming standby cloned with pg_basebackup. They run
as the `postgres` OS user in temporary directories, never touching the shared test server, whose
settings every other test relies on."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

PG_BIN = Path("/usr/lib/postgresql/15/bin")
OS_USER = "postgres"
#: The standby name a primary waits for and that never connects.
ABSENT = "absent_standby"
#: The name the pair's real standby streams under.
STANDBY = "standby_a"
#: A session that commits without waiting for any standby: for setting up and reading back.
LOCAL = {"options": "'-c synchronous_commit=local'"}


def local(dsn: str) -> str:
    """The same database, on a session whose commits do not wait for a standby."""
    return f"{dsn} options='-c synchronous_commit=local'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*argv: str) -> None:
    user = OS_USER if os.geteuid() == 0 else None
    done = subprocess.run(
        argv, user=user, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stdout[-800:]}{done.stderr[-800:]}")


@dataclass
class Server:
    """One PostgreSQL 15 cluster of our own."""

    data: Path
    port: int

    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        params = " ".join(f"{k}={v}" for k, v in extra.items())
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} {params}".strip()

    def start(self, *settings: str) -> None:
        options = f"-p {self.port} -k {self.data} -c shared_buffers=16MB -c max_connections=40 " + " ".join(
            f"-c {s}" for s in settings
        )
        _run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "server.log"), "-o",
             options, "-w", "start")  # fmt: skip

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            _run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def set(self, name: str, value: str) -> None:
        """ALTER SYSTEM and reload: how an HA engine changes a primary's settings."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
            # The postmaster rereads the file asynchronously: wait until a new session sees it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with psycopg.connect(self.dsn(), autocommit=True) as conn:
                row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
            if row is not None and row[0] == value:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not become {value!r}")


def _directory() -> Path:
    path = Path(tempfile.mkdtemp(prefix="tenure-repl-"))
    if os.geteuid() == 0:
        account = pwd.getpwnam(OS_USER)
        os.chown(path, account.pw_uid, account.pw_gid)
    return path


@contextlib.contextmanager
def primary(*settings: str) -> Iterator[Server]:
    """A fresh primary, ready for standbys to stream from, running until the block ends."""
    root = _directory()
    server = Server(root / "primary", _free_port())
    try:
        _run(str(PG_BIN / "initdb"), "-D", str(server.data), "-U", "postgres", "--auth=trust", "--no-sync")
        with (server.data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        server.start("wal_level=replica", "max_wal_senders=4", *settings)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def standby(of: Server, name: str) -> Iterator[Server]:
    """A streaming standby of `of`, cloned with pg_basebackup, known to it as `name`."""
    root = _directory()
    server = Server(root / name, _free_port())
    try:
        source = f"host=127.0.0.1 port={of.port} user=postgres application_name={name}"
        _run(str(PG_BIN / "pg_basebackup"), "-d", source, "-D", str(server.data), "-R", "-X", "stream")
        server.start("hot_standby=on")
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def wait_for(probe: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class SyncWaitCanceller:
    """Cancels, with pg_cancel_backend, every session waiting for a synchronous standby, as an HA
    engine or an operator does: PostgreSQL then answers each such COMMIT with its WARNING."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cancelled: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.server.dsn(), autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT pid, pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ).fetchall()
                self.cancelled += [pid for pid, _ in rows]
                time.sleep(0.02)

    def __enter__(self) -> SyncWaitCanceller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

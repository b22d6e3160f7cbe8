"""Helpers shared by the boundary tests (tests/boundaries, one scenario a module).

Polling waits with a deadline (a hang becomes a failure with a message), raw inspection of
jobs and their audit log, real worker processes, and a TCP proxy that can freeze a worker's
database traffic to simulate a network partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import conninfo
from psycopg.rows import dict_row

T = TypeVar("T")

TESTS_DIR = Path(__file__).resolve().parents[1]
SCHEMA = "tenure"
PROCESS_APP = "apps.boundary_app"


async def wait_until(
    probe: Callable[[], Awaitable[T]], *, timeout: float, what: str, interval: float = 0.05
) -> T:
    """Polls `probe` until it returns something truthy; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(interval)


async def wait_for(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """`wait_until` for a plain (non-async) condition on in-process state."""

    async def probe() -> Any:
        return condition()

    return await wait_until(probe, timeout=timeout, what=what, interval=0.01)


async def rows(conn: psycopg.AsyncConnection[Any], query: str, params: Any = None) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def job_row(conn: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any]:
    [row] = await rows(
        conn,
        f"SELECT id, state::text AS state, attempt_count, max_attempts, lease_owner, lease_token,"
        f" lease_expires_at, lease_deadline, last_error_code, last_error, finished_at"
        f" FROM {SCHEMA}.jobs WHERE id = %s",
        (job_id,),
    )
    return row


async def job_events(conn: psycopg.AsyncConnection[Any], job_id: int) -> list[dict[str, Any]]:
    return await rows(
        conn,
        f"SELECT event, from_state::text AS from_state, to_state::text AS to_state, token, worker,"
        f" error_code FROM {SCHEMA}.job_events WHERE job_id = %s ORDER BY id",
        (job_id,),
    )


async def states(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    found = await rows(conn, f"SELECT state::text AS state, count(*) AS n FROM {SCHEMA}.jobs GROUP BY state")
    return {r["state"]: r["n"] for r in found}


async def db_now(conn: psycopg.AsyncConnection[Any]) -> datetime:
    [row] = await rows(conn, "SELECT now() AS now")
    now: datetime = row["now"]
    return now


def at(base: datetime, seconds: float) -> datetime:
    """An injected clock reading `seconds` after `base`."""
    return base + timedelta(seconds=seconds)


# -- real worker processes --------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """A `tenure worker` subprocess running tests/apps/boundary_app.py."""

    worker_id: str
    popen: subprocess.Popen[bytes]
    out_path: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def pause(self) -> None:
        self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.popen.send_signal(signal.SIGCONT)

    def crash(self) -> None:
        """SIGKILL: no shutdown, no release, the lease is simply left behind."""
        self.popen.kill()
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> dict[str, Any]:
        """SIGTERM (graceful) and the worker's final counters, printed by `--json`."""
        self.popen.send_signal(signal.SIGTERM)
        code = self.popen.wait(timeout=timeout)
        assert code == 0, f"worker {self.worker_id} exited with {code}:\n{self.log()[-3000:]}"
        stats: dict[str, Any] = json.loads(self.out_path.read_text())
        return stats

    def cleanup(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGCONT)
                self.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)


def spawn_worker_process(
    dsn: str,
    workdir: Path,
    worker_id: str,
    *,
    lease: float,
    extra: tuple[str, ...] = (),
    app: str = PROCESS_APP,
    env_extra: dict[str, str] | None = None,
) -> WorkerProcess:
    out_path = workdir / f"{worker_id}.out"
    log_path = workdir / f"{worker_id}.log"
    env = {**os.environ, **(env_extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
    env.pop("TENURE_DSN", None)
    cmd = [
        sys.executable,
        "-m",
        "tenure.ops.cli",
        "-v",
        "worker",
        app,
        "--dsn",
        dsn,
        "--lease",
        str(lease),
        "--worker-id",
        worker_id,
        "--poll-interval",
        "0.2",
        "--concurrency",
        "2",
        "--json",
        *extra,
    ]
    with out_path.open("wb") as out, log_path.open("wb") as log:
        popen = subprocess.Popen(cmd, stdout=out, stderr=log, env=env, cwd=str(TESTS_DIR))
    return WorkerProcess(worker_id, popen, out_path, log_path)


def marker(marker_dir: Path, name: str) -> dict[str, Any] | None:
    path = marker_dir / name
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


async def wait_for_marker(
    marker_dir: Path, name: str, *, timeout: float, procs: tuple[WorkerProcess, ...] = ()
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        for proc in procs:
            if proc.popen.poll() is not None:
                raise AssertionError(
                    f"worker {proc.worker_id} exited early ({proc.popen.returncode}):\n{proc.log()[-3000:]}"
                )
        return marker(marker_dir, name)

    return await wait_until(probe, timeout=timeout, what=f"marker {name}")


# -- a network partition between one worker and the database ----------------------------------


class PartitionProxy:
    """A TCP front for the database whose traffic can be frozen in both directions.

    While partitioned, connections stay open but no byte gets through: a query sent by the
    worker simply never answers, which is what a cut network looks like from the client.
    Healing forwards what was held back.
    """

    def __init__(self, upstream_dsn: str) -> None:
        self.params = conninfo.conninfo_to_dict(upstream_dsn)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> PartitionProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def dsn(self) -> str:
        params = {k: v for k, v in self.params.items() if k not in ("host", "hostaddr", "port")}
        params.update(host="127.0.0.1", port=str(self.port), sslmode="disable", gssencmode="disable")
        return conninfo.make_conninfo(**params)  # type: ignore[arg-type]

    def partition(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host = str(self.params.get("host") or "localhost")
        port = int(self.params.get("port") or 5432)
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._connect_upstream()
        self._writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(src, dst))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            try:
                while data := await src.read(65536):
                    await self._open.wait()
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

    async def close(self) -> None:
        self.heal()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

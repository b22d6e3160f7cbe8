"""Helpers of the scale-out tests: the running PgBouncer, real worker processes, polling waits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from tenure.lab.soak.bouncer import Bouncer, launch_pgbouncer

__all__ = ["Bouncer", "launch_pgbouncer"]

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
APP = "_pooled_app"
STARTUP_TIMEOUT = 10.0


def show(bouncer: Bouncer, what: str, dbname: str) -> list[dict[str, Any]]:
    """`SHOW CLIENTS` or `SHOW SERVERS` from the admin console, for one database."""
    assert what in ("CLIENTS", "SERVERS")
    with (
        psycopg.connect(
            host=bouncer.host, port=bouncer.port, user=bouncer.user, dbname="pgbouncer", autocommit=True
        ) as conn,
        conn.cursor(row_factory=dict_row) as cur,
    ):
        cur.execute(f"SHOW {what}")
        return [row for row in cur.fetchall() if row["database"] == dbname]


@dataclass
class WorkerProcess:
    """One `tenure worker` subprocess; its stderr (the log) goes to a file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    def age(self) -> float:
        """Seconds since the process was started."""
        return time.monotonic() - self.started_at

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def running(self) -> bool:
        return self.popen.poll() is None

    def check_running(self) -> None:
        if not self.running():
            raise AssertionError(
                f"worker {self.name} exited ({self.popen.returncode}):\n{self.log()[-3000:]}"
            )

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and the exit code."""
        if self.running():
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout=timeout)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.name} still runs after {timeout}s:\n{self.log()[-3000:]}"
            ) from None


@dataclass
class WorkerProcesses:
    """Starts worker processes of tests/scaleout/_pooled_app.py in a test's directory."""

    workdir: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(
        self,
        dsn: str,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
        name: str | None = None,
    ) -> WorkerProcess:
        """A worker process; `prefix` runs it inside something (`ip netns exec NS`)."""
        name = name or f"worker-{len(self.started) + 1}"
        log_path = self.workdir / f"{name}.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_")}
        environment.update(env or {})
        environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        command = [*prefix, sys.executable, "-m", "tenure.ops.cli", "-v", "worker", APP, "--dsn", dsn,
                   "--worker-id", name, *args]  # fmt: skip
        with log_path.open("wb") as log:
            popen = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=environment)
        worker = WorkerProcess(name, popen, log_path)
        self.started.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self.started:
            if worker.running():
                worker.popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.popen.wait(timeout=10)


async def wait_until(
    probe: Callable[[], Awaitable[T]],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    workers: tuple[WorkerProcess, ...] = (),
) -> T:
    """Polls `probe` until it returns something truthy; fails after `timeout` seconds, or at once
    when one of `workers` has exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        for worker in workers:
            worker.check_running()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(interval)


async def rows(conn: psycopg.AsyncConnection[Any], query: str, params: Any = None) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def states(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    found = await rows(conn, "SELECT state::text AS state, count(*) AS n FROM tenure.jobs GROUP BY state")
    return {r["state"]: r["n"] for r in found}

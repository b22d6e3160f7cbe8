"""The demo's worker processes: real `tenure worker` processes that can be killed and paused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

from tenure.db.connect import DSN_ENV
from tenure.ops.demo.bank import QUEUE


@dataclass
class WorkerProcess:
    name: str
    owner: str
    proc: subprocess.Popen[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]
    stats_path: Path
    log_path: Path
    fate: list[str] = field(default_factory=list)
    paused: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stats(self) -> dict[str, Any] | None:
        """The counters the worker printed at a clean exit; None for a killed worker."""
        try:
            data = json.loads(self.stats_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


@dataclass(kw_only=True, eq=False)
class Fleet:
    """Starts `tenure worker tenure.ops.demo.bank` processes and signals them."""

    #: The app module the workers load and the queues they serve (the soak runs its own app).
    app_module: ClassVar[str] = "tenure.ops.demo.bank"
    queues: ClassVar[str] = QUEUE
    owner_prefix: ClassVar[str] = "demo"

    dsn: str
    schema: str
    lease: float
    concurrency: int
    #: Where each worker's output goes: `<name>.json` its counters at exit, `<name>.log` its log.
    run_dir: Path
    #: In every worker's id, so that the sessions of this run's workers are told from others'.
    run_id: str
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(self, count: int) -> None:
        for _ in range(count):
            self.workers.append(self._spawn(f"w{len(self.workers) + 1}"))

    def _spawn(self, name: str) -> WorkerProcess:
        owner = f"{self.owner_prefix}-{self.run_id}-{name}"
        argv = [
            sys.executable,
            "-m",
            "tenure.ops.cli",
            "worker",
            self.app_module,
            "--schema",
            self.schema,
            "--queues",
            self.queues,
            "--lease",
            str(self.lease),
            "--concurrency",
            str(self.concurrency),
            "--worker-id",
            owner,
            "--grace",
            str(max(1.0, self.lease)),
            "--poll-interval",
            "0.5",
            "--json",
        ]
        # The DSN goes through the environment, not argv, so a password never shows in `ps`.
        env = {**os.environ, DSN_ENV: self.dsn, **self.environment(name, owner)}
        stats_path = self.run_dir / f"{name}.json"
        log_path = self.run_dir / f"{name}.log"
        stdout = stats_path.open("wb")
        stderr = log_path.open("wb")
        argv = [*self.command_prefix(name), *argv]
        proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
        return WorkerProcess(name, owner, proc, stdout, stderr, stats_path, log_path, ["started"])

    def command_prefix(self, name: str) -> list[str]:
        """What the worker command runs under (the soak puts some in a network namespace)."""
        return []

    def environment(self, name: str, owner: str) -> dict[str, str]:
        """Extra environment for one worker (the soak skews some workers' clocks)."""
        return {}

    def kill(self, worker: WorkerProcess) -> None:
        """A crash: no shutdown code runs, the leases it holds are simply never released."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()
        worker.fate.append("SIGKILL")

    def pause(self, worker: WorkerProcess) -> None:
        """A stop-the-world pause: the process keeps its connections and believes it holds its jobs."""
        worker.proc.send_signal(signal.SIGSTOP)
        worker.paused = True
        worker.fate.append("SIGSTOP")

    def resume(self, worker: WorkerProcess) -> None:
        worker.proc.send_signal(signal.SIGCONT)
        worker.paused = False
        worker.fate.append("SIGCONT")

    def stop(self, timeout: float) -> None:
        """SIGTERM (graceful) to every live worker; SIGKILL for any that outlives `timeout`."""
        for worker in self.workers:
            if worker.alive:
                if worker.paused:
                    self.resume(worker)
                worker.proc.send_signal(signal.SIGTERM)
                worker.fate.append("SIGTERM")
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            try:
                worker.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
                worker.fate.append("SIGKILL (did not stop in time)")
        self._close_files()

    def abandon(self) -> None:
        """Last resort on any error: no worker of this run may outlive it, paused or not."""
        for worker in self.workers:
            if worker.alive:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(signal.SIGCONT)
                    worker.proc.kill()
                worker.proc.wait()
        self._close_files()

    def _close_files(self) -> None:
        for worker in self.workers:
            worker.stdout.close()
            worker.stderr.close()

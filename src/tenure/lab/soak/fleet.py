"""The soak's workers: the demo's fleet of real processes, with roles for the network and clock faults.

Slot w1 lives in its own network namespace (when this machine allows one), w2 and w3 run with their
wall clock minutes ahead and behind (libfaketime), the rest are plain. A killed worker is replaced
by a new process in the same slot.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from psycopg import conninfo

from tenure.db.connect import DSN_ENV
from tenure.lab.soak.app import LIMITED_QUEUE, QUEUE
from tenure.lab.soak.attempts import ATTEMPTS_ENV
from tenure.lab.soak.network import WorkerNetwork
from tenure.ops.demo.fleet import Fleet, WorkerProcess

FAKETIME_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
CLOCK_AHEAD = "+7m"
CLOCK_BEHIND = "-5m"


class Role(enum.Enum):
    PARTITIONABLE = "own network namespace"
    CLOCK_AHEAD = f"wall clock {CLOCK_AHEAD}"
    CLOCK_BEHIND = f"wall clock {CLOCK_BEHIND}"
    PLAIN = "plain"


def _direct(dsn: str, host: str | None) -> dict[str, str]:
    if host is None:
        return {DSN_ENV: dsn}
    return {DSN_ENV: conninfo.make_conninfo(dsn, host=host)}


def faketime_available() -> bool:
    return FAKETIME_LIBRARY.exists()


@dataclass(kw_only=True, eq=False)
class SoakFleet(Fleet):
    app_module: ClassVar[str] = "tenure.lab.soak.app"
    queues: ClassVar[str] = f"{QUEUE},{LIMITED_QUEUE}"
    owner_prefix: ClassVar[str] = "soak"

    #: The network namespace slot w1's worker runs in; None where this machine has none.
    network: WorkerNetwork | None
    #: The LOGIN role every worker connects as; None: the DSN's own user.
    role_name: str | None = None
    #: `connect_environment(dsn, host)`: the DSN variables of a worker that reaches the database at
    #: `host` (None: where the soak does); by default just the DSN, moved there.
    connect_environment: Callable[[str, str | None], dict[str, str]] = _direct
    #: Processes started so far in place of killed ones.
    replacements: int = field(default=0, init=False)

    @staticmethod
    def slot(name: str) -> str:
        return name.split(".", 1)[0]

    def role(self, name: str) -> Role:
        slot = self.slot(name)
        if slot == "w1" and self.network is not None:
            return Role.PARTITIONABLE
        if slot == "w2" and faketime_available():
            return Role.CLOCK_AHEAD
        if slot == "w3" and faketime_available():
            return Role.CLOCK_BEHIND
        return Role.PLAIN

    def attempts_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.attempts.jsonl"

    def command_prefix(self, name: str) -> list[str]:
        if self.role(name) is Role.PARTITIONABLE and self.network is not None:
            return self.network.command_prefix()
        return []

    def environment(self, name: str, owner: str) -> dict[str, str]:
        params: dict[str, Any] = conninfo.conninfo_to_dict(self.dsn)
        params["application_name"] = owner  # lets a fault find this worker's sessions
        if self.role_name is not None:
            params["user"] = self.role_name  # least privilege, so a revoked grant bites
            params.pop("password", None)
        role = self.role(name)
        host = self.network.host_ip if role is Role.PARTITIONABLE and self.network is not None else None
        env = self.connect_environment(conninfo.make_conninfo(**params), host)
        env[ATTEMPTS_ENV] = str(self.attempts_path(name))
        if role in (Role.CLOCK_AHEAD, Role.CLOCK_BEHIND):
            env["LD_PRELOAD"] = str(FAKETIME_LIBRARY)
            env["FAKETIME"] = CLOCK_AHEAD if role is Role.CLOCK_AHEAD else CLOCK_BEHIND
            # Every clock of the process moves, monotonic ones too: libfaketime 0.9.10 breaks
            # time.sleep when the monotonic clock is left real (EINVAL from clock_nanosleep).
            env["FAKETIME_NO_CACHE"] = "1"
        return env

    def live(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive]

    def current(self, slot: str) -> WorkerProcess | None:
        """The live worker of a slot (the latest replacement)."""
        for worker in reversed(self.workers):
            if self.slot(worker.name) == slot and worker.alive:
                return worker
        return None

    def replace(self, victim: WorkerProcess) -> WorkerProcess:
        """Starts a new process in the killed worker's slot, as a restarted host would."""
        self.replacements += 1
        worker = self._spawn(f"{self.slot(victim.name)}.{self.replacements}")
        self.workers.append(worker)
        return worker

    def exited_on_their_own(self) -> list[str]:
        """Workers that ended without being killed (a worker gives up when a critical service
        keeps failing): each with its exit status. Read before the soak stops them."""
        return [
            f"{w.name} (exit {w.proc.returncode})"
            for w in self.workers
            if not w.alive and "SIGKILL" not in w.fate and "SIGTERM" not in w.fate
        ]

    def slots(self) -> list[str]:
        return sorted({self.slot(w.name) for w in self.workers})

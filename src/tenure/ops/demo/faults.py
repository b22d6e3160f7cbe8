"""The faults the demo injects: one worker crashes, another freezes for longer than its lease.

Each fault waits for its moment (a share of the transfers finished) AND for its victim to hold
leases, so that it always hits jobs in flight rather than an idle process.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from tenure.ops.demo.fleet import Fleet, WorkerProcess
from tenure.ops.demo.queries import BankQueries, Progress

KILL_AT = 0.15
PAUSE_AT = 0.35
PAUSE_LEASES = 3.0


@dataclass(frozen=True)
class FaultEvent:
    at: float
    signal: str
    worker: str
    pid: int
    leases_held: int
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at, 2),
            "signal": self.signal,
            "worker": self.worker,
            "pid": self.pid,
            "leases_held": self.leases_held,
            "note": self.note,
        }


class Stage(enum.Enum):
    KILL = "kill"
    PAUSE = "pause"
    PAUSED = "paused"
    SETTLE = "settle"
    DONE = "done"


class Faults:
    def __init__(
        self,
        fleet: Fleet,
        bank: BankQueries,
        *,
        total: int,
        lease: float,
        enabled: bool,
        started: float,
    ) -> None:
        self.fleet = fleet
        self.bank = bank
        self.total = total
        self.lease = lease
        self.pause_for = PAUSE_LEASES * lease
        self.started = started
        self.stage = Stage.KILL if enabled else Stage.DONE
        self.events: list[FaultEvent] = []
        self._paused_at = 0.0
        self._resumed_at = 0.0

    @property
    def done(self) -> bool:
        return self.stage is Stage.DONE

    async def step(self, conn: AsyncConnection[Any], progress: Progress) -> FaultEvent | None:
        """Advances the plan by at most one fault; returns the fault it injected, if any."""
        share = progress.finished / max(1, self.total)
        all_finished = progress.finished >= self.total
        now = time.monotonic()
        if self.stage is Stage.KILL and (share >= KILL_AT or all_finished):
            victim = self.fleet.workers[0]
            held = await self.bank.running_by_owner(conn, victim.owner)
            if held or all_finished:
                self.fleet.kill(victim)
                self.stage = Stage.PAUSE
                return self._record("SIGKILL", victim, held, "crashed, its leases left to expire")
        elif self.stage is Stage.PAUSE and (share >= PAUSE_AT or all_finished):
            victim = self.fleet.workers[1]
            held = await self.bank.running_by_owner(conn, victim.owner)
            if held or all_finished:
                self.fleet.pause(victim)
                self._paused_at = now
                self.stage = Stage.PAUSED
                return self._record(
                    "SIGSTOP",
                    victim,
                    held,
                    f"frozen {self.pause_for:g}s, {PAUSE_LEASES:g}x the lease",
                )
        elif self.stage is Stage.PAUSED and now - self._paused_at >= self.pause_for:
            victim = self.fleet.workers[1]
            self.fleet.resume(victim)
            self._resumed_at = now
            self.stage = Stage.SETTLE
            return self._record("SIGCONT", victim, 0, "resumed, still sure it holds its leases")
        elif self.stage is Stage.SETTLE and now - self._resumed_at >= self.lease:
            self.stage = Stage.DONE  # the resumed worker has had time to meet the fence
        return None

    def _record(self, signal: str, worker: WorkerProcess, held: int, note: str) -> FaultEvent:
        event = FaultEvent(time.monotonic() - self.started, signal, worker.name, worker.pid, held, note)
        self.events.append(event)
        return event

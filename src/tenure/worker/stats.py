"""Counters a worker keeps about what happened to the jobs it handled."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class WorkerStats:
    claimed: int = 0
    handed: int = 0  # of those claimed, jobs that took this worker's offer in their enqueue
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    fencing_losses: int = 0
    leases_lost: int = 0
    heartbeats_sent: int = 0
    heartbeat_failures: int = 0
    claim_errors: int = 0
    write_errors: int = 0
    recovered_pending: int = 0  # back in the queue: scheduled for the backoff, or pending
    recovered_dead: int = 0
    released: int = 0
    snoozed: int = 0
    revoked: int = 0  # running jobs of this worker an operator revoked
    promoted: int = 0  # scheduled jobs this worker's promotion passes made pending
    waited: int = 0  # attempts that ended in a wait (the job left running for waiting)
    waits_timed_out: int = 0  # waiting jobs this worker's promotion passes woke at their deadline
    signals_swept: int = 0  # signals its recovery passes delivered after a send raced a wait
    #: Completions committed on the primary that no synchronous standby is known to have.
    not_replicated: int = 0
    failures_by_code: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failures_by_code"] = dict(self.failures_by_code)
        return data

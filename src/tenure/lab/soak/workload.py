"""What the soak's producer enqueues: a steady mix of the job kinds, reproducible from a seed."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from tenure.lab.soak.app import Kind
from tenure.lab.soak.ordered_effects import ORDERING_KEYS
from tenure.ops.demo.workload import MAX_AMOUNT

#: Share of each kind in the mix; transfers dominate, as in the demo.
MIX = {
    Kind.TRANSFER: 0.42,
    Kind.NOOP: 0.08,
    Kind.SLOW: 0.04,
    Kind.THREAD_SLOW: 0.04,
    Kind.FLAKY: 0.08,
    Kind.DOOMED: 0.04,
    Kind.ORDERED: 0.05,
    Kind.EFFECT: 0.05,
    Kind.OWN_TIMEOUT: 0.04,
    Kind.NUL_ERROR: 0.04,
    Kind.REFUSED: 0.04,
    Kind.SNOOZE: 0.03,
    Kind.THREAD_SNOOZE: 0.03,
    Kind.LIMITED: 0.03,
    Kind.ORM: 0.04,
    Kind.WAIT: 0.02,
    Kind.THREAD_WAIT: 0.02,
}
#: Kinds that wait for a signal the producer sends (signals.py).
WAITING_KINDS = frozenset({Kind.WAIT, Kind.THREAD_WAIT})
#: Kinds whose producer waits for the result: their finish notifies.
RESULT_WANTED = frozenset({Kind.SNOOZE, Kind.THREAD_SNOOZE})


@dataclass
class Mixer:
    accounts: int
    lease: float
    seed: int | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.signals = 0

    def batch(self, size: int) -> list[tuple[Kind, dict[str, Any]]]:
        kinds = self.rng.choices(list(MIX), weights=list(MIX.values()), k=size)
        return [(kind, self.payload(kind)) for kind in kinds]

    def payload(self, kind: Kind) -> dict[str, Any]:
        if kind in (Kind.TRANSFER, Kind.REFUSED):
            source, target = self.rng.sample(range(1, self.accounts + 1), 2)
            return {"source": source, "target": target, "amount": self.rng.randint(1, MAX_AMOUNT)}
        if kind in (Kind.SLOW, Kind.THREAD_SLOW):
            # Twice the lease in all: it lives only if its heartbeats renew the lease.
            return {"steps": 6, "step_seconds": round(self.lease / 3, 3)}
        if kind in (Kind.FLAKY, Kind.OWN_TIMEOUT):
            return {"fail_times": self.rng.randint(1, 3)}
        if kind is Kind.ORDERED:
            return {"key": f"k{self.rng.randint(1, ORDERING_KEYS)}"}
        if kind is Kind.DOOMED:
            return {"reason": "the payload names an account that never existed"}
        if kind is Kind.ORM:
            return {"account": self.rng.randint(1, self.accounts)}
        if kind is Kind.LIMITED:
            return {"seconds": round(self.lease / 4, 3)}
        if kind in (Kind.SNOOZE, Kind.THREAD_SNOOZE):
            return {"wait": round(self.rng.uniform(0.0, self.lease / 2), 3)}
        if kind in WAITING_KINDS:
            self.signals += 1
            return {"signal": f"soak:{self.seed}:{self.signals}"}
        return {}


#: Kinds the soak's operator may cancel while they run (JOB_REVOKE; counted separately).
CANCELLABLE_KINDS = frozenset({Kind.TRANSFER, Kind.SLOW, Kind.THREAD_SLOW, Kind.NOOP, Kind.FLAKY})


def expected(kind: str, state: str, code: str) -> bool:
    """Whether a job of this kind may end in this state with this error code."""
    # REVOKED when it was running at the cancel, CANCELLED when it was not (by then its lease had
    # expired, as a failover or a partition can make it): the operator's choice either way.
    if state == "cancelled" and code in ("REVOKED", "CANCELLED") and kind in CANCELLABLE_KINDS:
        return True
    if kind == Kind.DOOMED:
        return state == "dead" and code == "DOOMED"
    if kind == Kind.REFUSED:
        # Its own Permanent stands, raised from a savepoint: not the constraint's SQLSTATE.
        return state == "dead" and code == "ACCOUNT_EXISTS"
    if kind == Kind.TRANSFER:
        return state == "succeeded" or (state == "dead" and code == "INSUFFICIENT_FUNDS")
    return state == "succeeded"

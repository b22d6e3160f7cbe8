"""What the demo bank starts with and what it is asked to do, reproducible from a seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

OPENING_BALANCE = 1_000
MAX_AMOUNT = 100


@dataclass(frozen=True)
class Workload:
    """The bank's opening balances and the transfers to enqueue, as job payloads."""

    balances: dict[int, int]
    transfers: list[dict[str, int]]

    @property
    def total_money(self) -> int:
        return sum(self.balances.values())


def make_workload(accounts: int, transfers: int, seed: int | None = None) -> Workload:
    """Random transfers between distinct accounts. Amounts are small next to the balances, so an
    overdraft (a dead job, by design) is the exception rather than the rule."""
    rng = random.Random(seed)
    balances = {account: OPENING_BALANCE for account in range(1, accounts + 1)}
    payloads = []
    for _ in range(transfers):
        source, target = rng.sample(range(1, accounts + 1), 2)
        payloads.append({"source": source, "target": target, "amount": rng.randint(1, MAX_AMOUNT)})
    return Workload(balances, payloads)

"""The claim's oldest-first share: the bound on how long a job can be passed by others.

One job in every `every` that a worker claims from a queue is that queue's oldest due job,
whatever its priority; the rest go by priority. Counting is per worker and per queue and costs
nothing in the database: waiting jobs are never rewritten. docs/ordering.md derives the bound.
"""

from __future__ import annotations


class OldestShare:
    def __init__(self, every: int | None) -> None:
        self.every = every
        self.claimed: dict[str, int] = {}

    def take(self, queue: str, want: int) -> int:
        """How many of the next `want` jobs claimed from `queue` are to be its oldest due ones: job
        number n (counted from 1) is when n is a multiple of `every`."""
        if self.every is None:
            return 0
        done = self.claimed.get(queue, 0)
        return (done + want) // self.every - done // self.every

    def before_next(self, queue: str, want: int) -> int:
        """How many of the next `want` jobs claimed from `queue` come before the next one due to
        be its oldest: a claim of that many asks for no oldest share (`want` itself when no share
        is kept)."""
        if self.every is None:
            return want
        return min(want, self.every - 1 - self.claimed.get(queue, 0) % self.every)

    def record(self, queue: str, claimed: int) -> None:
        """Counts what a claim returned, not what it asked for: a claim that got fewer jobs than it
        asked for took every claimable one, the oldest among them."""
        self.claimed[queue] = self.claimed.get(queue, 0) + claimed

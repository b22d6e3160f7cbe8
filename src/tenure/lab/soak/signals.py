"""The soak's signals: each waiting job's signal, sent through every fault by the producer.

A third are sent before their job is enqueued, so the mailbox keeps them for a wait that has not
begun; the rest some time after, up to two leases later, while the job may be waiting, running,
or on a worker that a fault is about to kill. One in five is sent twice with its idempotency key,
which must write nothing the second time. A send that fails (a server restarting, a failover) is
tried again on the next tick with the same idempotency key: whether the first committed is unknown,
and the key makes the second harmless either way. When the load ends every signal still owed is
sent, so that every waiting job can finish."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from psycopg import DatabaseError

from tenure import Client, TenureError

#: Share of signals sent before their job is enqueued, and share sent a second time.
EARLY = 1 / 3
TWICE = 1 / 5


@dataclass
class Signaller:
    lease: float
    seed: int | None = None
    #: Signals still to send: (when, key, times left to send it).
    owed: list[tuple[float, str, int]] = field(default_factory=list)
    sent: int = 0
    duplicates: int = 0
    failed_sends: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(None if self.seed is None else self.seed + 1)

    def early(self) -> bool:
        return self.rng.random() < EARLY

    def owe(self, key: str, *, at_once: bool = False) -> None:
        """`key`'s signal is to be sent, now or up to two leases from now, once or twice."""
        when = time.monotonic() + (0.0 if at_once else self.rng.uniform(0.0, 2 * self.lease))
        self.owed.append((when, key, 2 if self.rng.random() < TWICE else 1))

    async def send(self, client: Client, key: str) -> bool:
        """Sends `key`'s signal, its payload naming the key; False when the send failed."""
        try:
            sent = await client.signal(key, {"key": key}, idempotency_key=key)
        except (TenureError, OSError, DatabaseError):
            self.failed_sends += 1
            return False
        self.sent += 1
        self.duplicates += sent.outcome == "duplicate"
        return True

    async def tick(self, client: Client, *, everything: bool = False) -> None:
        """Sends what is due (everything still owed, with `everything`); a failed send stays owed."""
        now, later = time.monotonic(), []
        for when, key, times in self.owed:
            if (not everything and when > now) or not await self.send(client, key):
                later.append((when, key, times))
            elif times > 1:
                later.append((now + self.rng.uniform(0.0, self.lease), key, times - 1))
        self.owed = later

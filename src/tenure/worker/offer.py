"""An idle worker's standing offer of a slot to the next lone job enqueued into its queues, which
that job takes inside its own INSERT (docs/hand-off.md): the job reaches the worker already
claimed, in its commit's notification, with no claim's round trip between the two.

The worker makes the offer only when it is idle: it runs nothing (no handler, no outcome still to
be written), its completions land, and its claims found its queues empty. It makes it when a claim
pass finds its queues empty or its last job's outcome has been written, renews it at the idle
passes that follow, and takes it back with the claim that fills its slots. An offer of a worker
that stopped renewing it (busy, paused, killed, cut off) lapses on its own in two polls. A worker
whose completions fail makes none, as it claims none: a job it took could not be finished.

The offered slot is not held back from claims: a job that took the offer after claims filled the
worker's slots (in the moment before the offer was taken back) is given back, pending at once with
its attempt not counted, which costs that job a round trip and no one any capacity. A worker only
busy for a moment (jobs arriving under load) keeps its offer standing, to be renewed, rather than
taking it back and making it again at every turn.
A job handed to a worker that died runs again once its lease expires, as a claimed job of a worker
that died does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psycopg import AsyncConnection

from tenure.db.offer_queries import OfferQueries
from tenure.worker.service import SYSTEM_CLOCK, Clock

#: How long an offer stands, in poll intervals: renewed at an idle worker's polls (each claim pass
#: that finds its queues empty renews it past half its time), it lapses this long after the last.
STANDS_FOR_POLLS = 2.0
#: Past the offer's own time (counted from the answer to its making or renewal), how long the
#: worker still takes it to stand: a job that took it just before it lapsed may still be on its
#: way, in its commit's notification (seconds).
LAPSE_GRACE = 1.0


class Offer:
    """One worker's offer (handoff.sql). It stands from its making until the job that took it is
    heard, or it lapsed (`standing`)."""

    def __init__(
        self,
        queries: OfferQueries,
        *,
        worker: str,
        channel: str,
        queues: Sequence[str],
        tasks: Sequence[str],
        lease_seconds: float,
        runtime_seconds: float,
        poll_interval: float,
        listening: Callable[[], bool],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.queries = queries
        self.worker = worker
        self.channel = channel
        self.queues = list(queues)
        self.tasks = list(tasks)
        self.lease_seconds = lease_seconds
        self.runtime_seconds = runtime_seconds
        self.stands_for = max(0.5, STANDS_FOR_POLLS * poll_interval)
        #: Whether the worker's listener hears its channel now: an offer is made only then.
        self.listening = listening
        self.clock = clock
        self._standing = False
        self._lapses_at = 0.0
        self._renew_at = 0.0

    def standing(self) -> bool:
        """Whether the offer stands, as far as this worker knows: made, not heard taken, not lapsed."""
        if self._standing and self.clock.monotonic() > self._lapses_at:
            self._standing = False
        return self._standing

    def due(self) -> bool:
        """Whether the offer is to be made (none stands) or renewed (half its time has gone)."""
        return not self.standing() or self.clock.monotonic() >= self._renew_at

    def may_make(self, idle: bool) -> bool:
        """Whether an offer may be made or renewed now: the worker is `idle` (it runs nothing,
        and its completions land), it has tasks to offer a slot for, and its listener hears its
        channel."""
        return idle and bool(self.tasks) and self.listening()

    async def stand(self, conn: AsyncConnection[Any]) -> None:
        """After a claim pass that found the queues empty: makes the offer, or renews the
        standing one once half its time has gone. A renewal that finds it taken (its job not yet
        heard) only makes it stand longer: its job is on its way."""
        if not self.due():
            return
        if self._standing:  # due() just asked standing(): it stands, and is due for renewal
            slots = await self.queries.renew(conn, worker=self.worker, stands_for=self.stands_for)
            if slots is not None:
                self._stood()
                return
            # Gone (an operator removed it): made again below.
        await self.queries.make(
            conn,
            worker=self.worker,
            channel=self.channel,
            queues=self.queues,
            tasks=self.tasks,
            lease_seconds=self.lease_seconds,
            runtime_seconds=self.runtime_seconds,
            stands_for=self.stands_for,
        )
        self._standing = True
        self._stood()

    def _stood(self) -> None:
        answered = self.clock.monotonic()
        self._lapses_at = answered + self.stands_for + LAPSE_GRACE
        self._renew_at = answered + self.stands_for / 2

    def heard(self) -> None:
        """A job that took the offer was heard: the offer is made again for the next one."""
        self._standing = False

    async def withdraw(self, conn: AsyncConnection[Any]) -> bool:
        """Takes the offer back; whether a job had taken it (heard or not: the caller looks for
        one it did not hear). Waits for an enqueue holding the offer to end."""
        self._standing = False
        return await self.queries.withdraw(conn, worker=self.worker) == 0

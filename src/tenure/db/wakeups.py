"""Waking workers for jobs just enqueued: inside the enqueue's own transaction, or after it.

A notification sent inside a transaction is delivered at its commit, which is what a job
enqueued in the caller's transaction needs. But PostgreSQL serializes the commits of all
transactions that notify (a lock held through the commit's WAL flush), so enqueues that notify
commit one at a time, server-wide, where plain inserts share their flushes. When the enqueue's
statement is a transaction of its own (an autocommit connection outside any transaction, as the
client's own pool lends), the job's commit needs no notification in it: the workers are told
right after, in a transaction that commits without waiting for its flush (queue_notify with
after_commit). The job's durability is the insert's; the notification is only a hint. One case
notifies inside that commit instead: a lone job due now whose queue is at rest for this client
(NotifyLimiter.admit_at_rest: no enqueue of this client began on it, and no notification of it
was confirmed, for INLINE_QUIET). Its notification then reaches the workers with the commit, a
round trip sooner; such commits hold the notify lock through their flush, so they are kept to a
queue at rest, where nothing else notifies.

Under load that second statement is most of what an enqueue costs the client, and the workers
are claiming anyway; so a client that notified a queue after a commit of its own lets
NOTIFY_COOLDOWN pass before it does so again (NotifyLimiter), and a worker claims once more
NOTIFY_COOLDOWN after each notification it receives. A job whose notification was left out was
committed before the client decided to leave it out, less than NOTIFY_COOLDOWN after a
notification that was sent and confirmed, so before that notification's follow-up claim: it
waits NOTIFY_COOLDOWN at most, not a poll interval. Only a confirmed notification holds others
back: while one is in flight, or after one failed or was cancelled, the next commit sends its
own. A notification inside the caller's transaction is never left out: its commit may come any
time later, after any follow-up.

The async client sends them one at a time: what commits admit while one is on its way waits, and
goes in the next, which starts after those commits and so is delivered after them. Under a load
its notifications cannot keep up with, a client then holds one notification in flight and one
waiting, not one for every commit (each waiting for a connection, and each giving up on it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, Connection, pq


@dataclass(slots=True)
class Wakeups:
    """What to notify once jobs are committed: the queues that got jobs due now, and the
    earliest run time among jobs that went in scheduled."""

    queues: set[str] = field(default_factory=set)
    first_scheduled: datetime | None = None

    def add(self, queue: str, available_at: datetime, scheduled: bool) -> None:
        if not scheduled:
            self.queues.add(queue)
        elif self.first_scheduled is None or available_at < self.first_scheduled:
            self.first_scheduled = available_at

    def __bool__(self) -> bool:
        return bool(self.queues) or self.first_scheduled is not None

    def merge(self, other: Wakeups) -> None:
        """Adds what `other` has to notify: one notification then covers both."""
        self.queues |= other.queues
        if other.first_scheduled is not None and (
            self.first_scheduled is None or other.first_scheduled < self.first_scheduled
        ):
            self.first_scheduled = other.first_scheduled


#: How long a client waits before it notifies a queue again for jobs committed on their own, and
#: how long after a notification a worker claims once more (seconds).
NOTIFY_COOLDOWN = 0.005
#: How long a queue must have gone without an enqueue or a notification from this client for a
#: lone job's insert to notify inside its own commit (seconds). Under a steady load, notifying
#: commits hold the notify lock through their flush one after another: measured with 20 producer
#: connections, inserts that notified whenever the cooldown allowed drained a third slower end to
#: end.
INLINE_QUIET = 4 * NOTIFY_COOLDOWN


class NotifyLimiter:
    """Which queues a client notifies after a commit of its own: each at most once per
    NOTIFY_COOLDOWN of a notification that was confirmed sent. Scheduled jobs' hints always go
    (rare, and each names its own due time)."""

    def __init__(self) -> None:
        self._sent_at: dict[str, float] = {}
        #: Per queue, when this client last asked whether it was at rest (admit_at_rest).
        self._asked_at: dict[str, float] = {}

    def admit(self, wakeups: Wakeups) -> Admitted:
        """What of `wakeups` to send now: the queues not notified for NOTIFY_COOLDOWN. Nothing
        counts as notified until `sent` confirms it: a send that fails or is cancelled holds back
        no later commit's notification."""
        now, cooldown = time.monotonic(), NOTIFY_COOLDOWN
        due = {q for q in wakeups.queues if now - self._sent_at.get(q, -cooldown) >= cooldown}
        return Admitted(Wakeups(due, wakeups.first_scheduled), now)

    def admit_at_rest(self, queue: str) -> Admitted | None:
        """`queue`, for a lone job's insert to notify inside its own commit, when the queue is at
        rest for this client: no enqueue of it asked here, and no notification of it was
        confirmed, for INLINE_QUIET (or NOTIFY_COOLDOWN, when that is longer). Every call counts
        as the queue's enqueue, admitted or not: of enqueues that begin together after a quiet
        spell, only the first notifies in its commit, and under a steady flow none does. (A
        confirmed notification alone is not enough to tell: concurrent enqueues all asked before
        the first one's commit confirmed it, and a notification that waits behind such commits
        confirms late; both let the flow's inserts notify inside their commits, up to a third of
        them in the end-to-end benchmark.)"""
        now, quiet_for = time.monotonic(), max(NOTIFY_COOLDOWN, INLINE_QUIET)  # read now: tests set them
        asked, self._asked_at[queue] = self._asked_at.get(queue), now
        if asked is not None and now - asked < quiet_for:
            return None
        if now - self._sent_at.get(queue, -quiet_for) < quiet_for:
            return None
        return Admitted(Wakeups({queue}), now)

    def sent(self, admitted: Admitted) -> None:
        """`admitted` reached the server: its queues count as notified from when it was admitted,
        which is before the workers received it (the bound above needs no later moment)."""
        for queue in admitted.wakeups.queues:
            self._sent_at[queue] = max(self._sent_at.get(queue, admitted.at), admitted.at)


@dataclass(frozen=True, slots=True)
class Admitted:
    """What a client was admitted to notify, and when."""

    wakeups: Wakeups
    at: float


def owns_commit(conn: AsyncConnection[Any] | Connection[Any]) -> bool:
    """Whether each statement sent on `conn` now commits on its own: autocommit, outside any
    transaction, not in pipeline mode (where statements share one until the next sync)."""
    # Read from the libpq connection: conn.info makes a new object, and each of its statuses an
    # enum member, at every enqueue.
    pgconn = conn.pgconn
    return (
        conn.autocommit
        and pgconn.transaction_status == pq.TransactionStatus.IDLE
        and pgconn.pipeline_status == pq.PipelineStatus.OFF
    )

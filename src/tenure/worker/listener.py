"""LISTEN on its own direct connection; a notification wakes the claimer, and an idle claimer's
claim runs at once, in the listener's own step (Claimer.notified).

Behind a transaction pooler (PgBouncer in transaction mode) a LISTEN lands on whichever server
session the pooler lends for that one statement, and notifications never come back. So after
each LISTEN the listener sends itself a probe notification through the worker's pool; when the
probe does not arrive it says so, once, naming the fix (a direct `listen_dsn`), and the worker
goes on by polling.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

import psycopg
from psycopg import sql

from tenure.db.channels import notify_channel, revoke_hint, scheduled_hint
from tenure.db.connect import application_name, describe_dsn, prepare_threshold
from tenure.worker.health import ServiceHealth, describe_error
from tenure.worker.service import Service

log = logging.getLogger("tenure.worker")

#: How long the probe notification may take before wake-ups are declared not to work.
PROBE_TIMEOUT = 5.0
#: Probes lost in a row before the listener says it is behind a transaction pooler.
PROBE_ATTEMPTS = 3


class Listener(Service):
    """LISTENs on the schema's channel and hands on what it hears: a queue's wake-up to the
    claimer, a scheduled job's due time to the promoter, a revoked lease to its execution."""

    name = "listener"

    def __init__(
        self,
        dsn: str,
        schema: str,
        queues: set[str],
        wake: Callable[[], Awaitable[object] | None],
        *,
        health: ServiceHealth | None = None,
        send_probe: Callable[[str], Awaitable[None]] | None = None,
        poll_interval: float = 1.0,
        scheduled: Callable[[datetime], None] = lambda due: None,
        revoked: Callable[[int, int], None] = lambda job_id, token: None,
        offer_channel: str | None = None,
        handed: Callable[[str], None] | None = None,
        listening_again: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.dsn = dsn
        self.channel = notify_channel(schema)
        self.queues = queues
        #: Told of each wake-up for one of its queues; what it returns (an idle claimer's claim)
        #: is run before the next notification is read, so a revocation or a scheduled job's hint
        #: heard meanwhile waits for that claim (milliseconds; at most the worker's statement bound).
        self.wake = wake
        self.health = health or ServiceHealth("listener", critical=False)
        self.send_probe = send_probe
        self.poll_interval = poll_interval
        self.scheduled = scheduled  # told the due time of jobs enqueued as scheduled, any queue
        self.revoked = revoked  # told (job id, token) of a running job an operator revoked
        #: The worker's own channel, where a job that took its offer comes (tenure.worker.offer);
        #: each such job is given to `handed`, and `listening_again` runs at every (re)connect,
        #: for the jobs handed while the listener did not listen.
        self.offer_channel = offer_channel
        self.handed = handed
        self.listening_again = listening_again
        self.connected = asyncio.Event()
        self.probe_arrived = asyncio.Event()
        self._probe_payload = f"probe:{uuid.uuid4().hex}"
        self._warned = False

    def hears(self) -> bool:
        """Whether notifications reach this listener now: it is connected, and its probe, sent
        through the worker's pool, came back (behind a transaction pooler it never does). A
        worker offers its slot to enqueues only then, since the job that takes it comes by
        notification (tenure.worker.offer)."""
        return self.connected.is_set() and self.probe_arrived.is_set()

    def next_delay(self, result: None) -> float:
        return self.health.backoff()  # the notifications ended: connect again

    def failed(self, exc: BaseException) -> float:
        # Polling every poll_interval goes on meanwhile: a lost listener costs latency, no job.
        self.connected.clear()
        return self.health.backoff()

    async def run_once(self) -> None:
        """Connects, LISTENs and hands on every notification until the connection is lost."""
        self.probe_arrived.clear()  # it proves this connection anew
        async with await psycopg.AsyncConnection.connect(
            self.dsn,
            autocommit=True,
            prepare_threshold=prepare_threshold(),
            **application_name(self.dsn, "tenure-listen"),
        ) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            if self.offer_channel is not None:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.offer_channel)))
            self.connected.set()
            self.health.succeeded()
            await self._woken()  # anything committed while we were not listening
            if self.listening_again is not None:
                await self.listening_again()
            probe = asyncio.create_task(self._probe()) if self.send_probe is not None else None
            try:
                async for note in conn.notifies():
                    if note.channel == self.offer_channel and self.handed is not None:
                        self.handed(note.payload)
                    elif note.payload in self.queues:
                        await self._woken()
                    elif note.payload == self._probe_payload:
                        self.probe_arrived.set()
                        if self.offer_channel is not None:
                            await self._woken()  # an idle worker offers its slot now it hears
                    elif (due := scheduled_hint(note.payload)) is not None:
                        self.scheduled(due)
                    elif (lease := revoke_hint(note.payload)) is not None:
                        self.revoked(*lease)
            finally:
                if probe is not None:
                    probe.cancel()

    async def _woken(self) -> None:
        claim = self.wake()
        if claim is not None:
            await claim

    async def _probe(self) -> None:
        """Checks that a notification sent through the pool comes back on this connection.

        Right after a failover the pool may still hold a session on the old primary, whose
        notifications never reach this one: so one lost probe proves nothing, and only
        PROBE_ATTEMPTS lost in a row (a pooler loses every one) make the warning."""
        assert self.send_probe is not None
        try:
            for attempt in range(PROBE_ATTEMPTS):
                self.probe_arrived.clear()
                await self.send_probe(self._probe_payload)
                try:
                    async with asyncio.timeout(PROBE_TIMEOUT):
                        await self.probe_arrived.wait()
                    return
                except TimeoutError:
                    if attempt + 1 == PROBE_ATTEMPTS:
                        raise
        except TimeoutError:
            if not self._warned:
                self._warned = True
                log.warning(
                    "LISTEN on %s receives no notifications (a transaction pooler such as PgBouncer "
                    "in front?): wake-ups fall back to polling every %.1fs. Give workers a direct "
                    "connection for LISTEN with --listen-dsn or TENURE_LISTEN_DSN",
                    describe_dsn(self.dsn),
                    self.poll_interval,
                )
        except Exception as exc:
            log.info("could not send the listener's probe notification: %s", describe_error(exc))

"""The jobs that took this worker's offer (tenure.worker.offer, docs/hand-off.md): each heard on
the worker's own channel and started as a claimed job is, or given back when the worker would
not have claimed it now; those its listener did not hear are found when it listens again, and at
the worker's stop its offer is taken back."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from tenure.db.job_rows import UNREADABLE
from tenure.db.offer_queries import handed_row
from tenure.db.queries import claimed_job
from tenure.model.jobs import ClaimedJob
from tenure.telemetry.tracing import batch_span, set_batch_size
from tenure.worker.health import describe_error
from tenure.worker.offer import Offer
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: A handed job's lease is counted from its notification less this share of the lease, at most
#: HANDED_LEASE_MARGIN seconds: the lease began at the enqueue's statement, before that statement's
#: commit and the notification's delivery (milliseconds, unless the commit's flush stalled).
HANDED_LEASE_SHARE = 0.1
HANDED_LEASE_MARGIN = 1.0


class HandedJobs:
    """`start(job, sent_at, traced)` runs a job this worker holds the lease of, as a claimed one
    (Claimer.start_held); `may_take()` says whether the worker would claim a job now; `running()`
    holds the (id, token) of every attempt it runs, and `room()` is its free slots."""

    def __init__(
        self,
        services: WorkerServices,
        offer: Offer,
        *,
        start: Callable[[ClaimedJob, float, bool], None],
        may_take: Callable[[], bool],
        running: Callable[[], Mapping[tuple[int, int], object]],
        room: Callable[[], int],
    ) -> None:
        self.services = services
        self.offer = offer
        self.start = start
        self.may_take = may_take
        self.running = running
        self.room = room
        #: (id, token) of the jobs the last look for unheard ones found: a job committed between
        #: the listener's LISTEN and that look is both found and heard, and must start once.
        self._found: set[tuple[int, int]] = set()

    def heard(self, payload: str) -> None:
        """A job took the offer (its notification): it starts as a claimed job does. A job the
        worker would not have claimed now (it stops, claims filled its slots since it made the
        offer, or its completions fail) is given back, pending at once with its attempt not
        counted."""
        heard_at = time.monotonic()
        self.offer.heard()
        try:
            row = handed_row(payload)
        except ValueError as exc:
            log.warning("a hand-off notification could not be read, and is left to its lease: %s", exc)
            return
        key = (row[0], row[7])
        if key in self._found or key in self.running():
            return  # found already by the look for unheard ones, as the listener connected
        try:
            job = claimed_job(row, self.services.owner)
        except UNREADABLE as exc:
            self.services.in_background(self._set_aside(row[0], row[7], f"{type(exc).__name__}: {exc}"[:500]))
            return
        if not self.may_take():
            self.services.in_background(self._give_back([job]))
            return
        self._start([job], heard_at)

    async def unheard(self) -> None:
        """Starts the jobs that took the offer while the listener did not hear them (it was
        reconnecting): what the listener runs each time it listens again."""
        services = self.services
        try:
            async with services.connection() as conn:
                jobs = await services.queries.jobs_handed_unheard(
                    conn, owner=services.owner, known=self._known()
                )
        except Exception as exc:
            log.warning(
                "could not look for jobs handed to this worker unheard (%s): their leases expire",
                describe_error(exc),
            )
            return
        self._found = {(job.id, job.lease.token) for job in jobs}
        if not jobs:
            return
        self.offer.heard()
        room = max(0, self.room()) if self.may_take() else 0
        self._start(jobs[:room], time.monotonic())
        if jobs[room:]:
            await self._give_back(jobs[room:])

    async def withdraw(self) -> None:
        """The worker stops: its offer is taken back, and a job that took it unheard is given back."""
        services = self.services
        try:
            async with services.connection() as conn:
                if not await self.offer.withdraw(conn):
                    return
                unheard = await services.queries.jobs_handed_unheard(
                    conn, owner=services.owner, known=self._known()
                )
        except Exception as exc:
            log.warning("this worker's offer was not withdrawn (%s): it lapses", describe_error(exc))
            return
        if unheard:
            await self._give_back(unheard)

    def _known(self) -> list[int]:
        """The ids of the jobs the worker runs: a look for unheard ones leaves them out."""
        return [job_id for job_id, _ in self.running()]

    def _start(self, jobs: list[ClaimedJob], heard_at: float) -> None:
        services = self.services
        services.stats.claimed += len(jobs)
        services.stats.handed += len(jobs)
        for job in jobs:
            services.events.handed(job)
            with batch_span("claim", job.queue) as span:  # a claim with no query: its span
                set_batch_size(span, 1)
            lease = (job.lease.expires_at - job.db_now).total_seconds()
            self.start(job, heard_at - min(HANDED_LEASE_MARGIN, HANDED_LEASE_SHARE * lease), span is not None)

    async def _give_back(self, jobs: list[ClaimedJob]) -> None:
        services = self.services
        try:
            async with services.connection() as conn:
                await services.queries.lease_release_many(
                    conn, owner=services.owner, leases=[(j.id, j.lease.token) for j in jobs], reason="NO_SLOT"
                )
            services.stats.released += len(jobs)
        except Exception as exc:
            log.warning(
                "could not give back %s handed jobs this worker would not take (%s): their leases "
                "expire and recovery gives them back",
                len(jobs),
                describe_error(exc),
            )

    async def _set_aside(self, job_id: int, token: int, why: str) -> None:
        try:
            async with self.services.connection() as conn:
                await self.services.queries.set_aside(conn, self.services.owner, [(job_id, token, why)])
        except Exception as exc:
            log.warning(
                "handed job %s, unreadable here, was not set aside (%s): its lease expires",
                job_id,
                describe_error(exc),
            )

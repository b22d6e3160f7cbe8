"""What happens inside a worker, as typed events that subscribers turn into metrics.

The runtime calls one `Events` method at each point of interest (a claim, a job's outcome, a
lost lease, a failed heartbeat, a recovered lease). With no subscriber a call is one loop over
an empty list, so the hooks cost nothing on the hot path; subscribers must be as cheap: count,
observe, never block or touch the database.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from tenure.model.jobs import ClaimedJob

if TYPE_CHECKING:
    from tenure.db.queries import RecoveredLease

log = logging.getLogger("tenure.worker")


class Outcome(enum.StrEnum):
    """How one attempt ended, as far as this worker knows."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEAD = "dead"
    FENCED = "fenced"  # the fence refused our completion or failure write
    SNOOZED = "snoozed"  # back to wait, the attempt not spent
    WAITING = "waiting"  # waits for a signal or a time (ctx.wait_for, ctx.sleep), the attempt not spent
    #: Succeeded on the primary, but not known to be on a synchronous standby: a failover now
    #: can bring the job back (docs/guarantees.md, "Across a failover").
    NOT_REPLICATED = "not_replicated"


class EventSink(Protocol):
    """A subscriber to worker events. Every method must be cheap and must not raise."""

    def claimed(self, queue: str, jobs: Sequence[ClaimedJob], claim_seconds: float) -> None:
        """One claim query ran on `queue`, took `claim_seconds`, and returned `jobs`."""

    def handed(self, job: ClaimedJob) -> None:
        """`job` took this worker's offer in its enqueue (docs/hand-off.md): claimed with no claim
        query. Optional: a sink without this method is not told."""

    def job_finished(
        self, job: ClaimedJob, outcome: Outcome, error_code: str | None, run_seconds: float
    ) -> None:
        """An attempt's outcome was written (or refused by the fence) `run_seconds` after its claim."""

    def lease_lost(self, job: ClaimedJob, reason: str, code: str) -> None:
        """The worker learned it no longer holds `job`'s lease and stopped the job; `code` says
        how (LEASE_EXPIRED, HEARTBEAT_REFUSED, RECLAIMED, REVOKED, ...)."""

    def fencing_loss(self, job: ClaimedJob, code: str) -> None:
        """A fenced write for `job` updated zero rows."""

    def heartbeat_failed(self) -> None:
        """A heartbeat (lease renewal) could not reach the database."""

    def leases_recovered(self, leases: Sequence[RecoveredLease]) -> None:
        """This process's recovery pass moved expired leases back to pending or to dead."""


class Events:
    """Fans each event out to the subscribed sinks; a failing sink is logged, never propagated."""

    def __init__(self) -> None:
        self.sinks: list[EventSink] = []

    def subscribe(self, sink: EventSink) -> None:
        self.sinks.append(sink)

    def claimed(self, queue: str, jobs: Sequence[ClaimedJob], claim_seconds: float) -> None:
        for sink in self.sinks:
            try:
                sink.claimed(queue, jobs, claim_seconds)
            except Exception:
                log.exception("event sink %r failed", sink)

    def handed(self, job: ClaimedJob) -> None:
        for sink in self.sinks:
            told = getattr(sink, "handed", None)  # added after the others: a sink may lack it
            if told is None:
                continue
            try:
                told(job)
            except Exception:
                log.exception("event sink %r failed", sink)

    def job_finished(
        self, job: ClaimedJob, outcome: Outcome, error_code: str | None, run_seconds: float
    ) -> None:
        for sink in self.sinks:
            try:
                sink.job_finished(job, outcome, error_code, run_seconds)
            except Exception:
                log.exception("event sink %r failed", sink)

    def lease_lost(self, job: ClaimedJob, reason: str, code: str) -> None:
        for sink in self.sinks:
            try:
                sink.lease_lost(job, reason, code)
            except Exception:
                log.exception("event sink %r failed", sink)

    def fencing_loss(self, job: ClaimedJob, code: str) -> None:
        for sink in self.sinks:
            try:
                sink.fencing_loss(job, code)
            except Exception:
                log.exception("event sink %r failed", sink)

    def heartbeat_failed(self) -> None:
        for sink in self.sinks:
            try:
                sink.heartbeat_failed()
            except Exception:
                log.exception("event sink %r failed", sink)

    def leases_recovered(self, leases: Sequence[RecoveredLease]) -> None:
        if not leases:
            return
        for sink in self.sinks:
            try:
                sink.leases_recovered(leases)
            except Exception:
                log.exception("event sink %r failed", sink)

"""Worker-side metrics, fed by the runtime's events (tenure.worker.events)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tenure.model.jobs import ClaimedJob, JobState
from tenure.worker.events import Outcome

if TYPE_CHECKING:
    from tenure.db.queries import RecoveredLease

CLAIM_QUERY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LATENCY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
#: Attempts above this share one label value, so a job with a huge budget cannot explode the series.
MAX_ATTEMPT_LABEL = 10


def attempt_label(attempt: int) -> str:
    return str(attempt) if attempt < MAX_ATTEMPT_LABEL else f"{MAX_ATTEMPT_LABEL}+"


class RuntimeMetrics:
    """An EventSink that keeps one worker's counters and histograms in `registry`.

    `busy` reports the slots in use at scrape time; `concurrency` is the worker's slot count.
    """

    def __init__(self, registry: CollectorRegistry, *, busy: Callable[[], int], concurrency: int) -> None:
        def counter(name: str, documentation: str, *labels: str) -> Counter:
            return Counter(name, documentation, labels, registry=registry)

        def histogram(name: str, documentation: str, buckets: Sequence[float], *labels: str) -> Histogram:
            return Histogram(name, documentation, labels, buckets=buckets, registry=registry)

        self.claims = counter("tenure_claims", "Claim queries run, by queue", "queue")
        self.jobs_claimed = counter("tenure_jobs_claimed", "Jobs claimed, by queue", "queue")
        self.jobs_handed = counter(
            "tenure_jobs_handed",
            "Jobs that took this worker's offer in their enqueue (counted among those claimed), by queue",
            "queue",
        )
        self.claim_query = histogram(
            "tenure_claim_query_seconds",
            "Duration of one claim query (round trip), by queue",
            CLAIM_QUERY_BUCKETS,
            "queue",
        )
        self.claim_latency = histogram(
            "tenure_job_claim_latency_seconds",
            "From a job becoming available to its claim, in database time, by queue",
            LATENCY_BUCKETS,
            "queue",
        )
        self.run_seconds = histogram(
            "tenure_job_completion_seconds",
            "From a job's claim to its outcome being written, by queue and outcome",
            LATENCY_BUCKETS,
            "queue",
            "outcome",
        )
        self.finished = counter(
            "tenure_jobs_finished",
            "Attempts finished by this worker, by queue and outcome (throughput)",
            "queue",
            "outcome",
        )
        self.retries = counter(
            "tenure_job_retries",
            "Failed attempts scheduled for a retry, by queue, error code and attempt",
            "queue",
            "error_code",
            "attempt",
        )
        self.fencing_losses = counter(
            "tenure_fencing_losses",
            "Fenced writes that updated zero rows: this worker had lost the lease",
            "queue",
        )
        self.leases_lost = counter(
            "tenure_leases_lost",
            "Jobs this worker stopped because it learned its lease was gone (expired or taken)",
            "queue",
        )
        self.jobs_revoked = counter(
            "tenure_jobs_revoked",
            "Running jobs of this worker that an operator revoked, and that it stopped",
            "queue",
        )
        self.leases_expired = counter(
            "tenure_leases_expired",
            "Expired leases this process's recovery moved back to pending or to dead",
            "queue",
            "to_state",
        )
        self.heartbeat_failures = counter(
            "tenure_heartbeat_failures", "Heartbeats that could not reach the database"
        )
        busy_gauge = Gauge("tenure_worker_busy_slots", "Slots running a job now", registry=registry)
        busy_gauge.set_function(lambda: float(busy()))
        slots = Gauge("tenure_worker_concurrency", "Slots this worker has", registry=registry)
        slots.set(concurrency)
        saturation = Gauge(
            "tenure_worker_saturation", "Busy slots / slots (1 = every slot in use)", registry=registry
        )
        saturation.set_function(lambda: busy() / concurrency)

    # -- EventSink ---------------------------------------------------------------------------------

    def claimed(self, queue: str, jobs: Sequence[ClaimedJob], claim_seconds: float) -> None:
        self.claims.labels(queue).inc()
        self.claim_query.labels(queue).observe(claim_seconds)
        if jobs:
            self.jobs_claimed.labels(queue).inc(len(jobs))
            latency = self.claim_latency.labels(queue)
            for job in jobs:
                latency.observe(max(0.0, (job.db_now - job.available_at).total_seconds()))

    def handed(self, job: ClaimedJob) -> None:
        self.jobs_handed.labels(job.queue).inc()
        self.jobs_claimed.labels(job.queue).inc()
        latency = (job.db_now - job.available_at).total_seconds()
        self.claim_latency.labels(job.queue).observe(max(0.0, latency))

    def job_finished(
        self, job: ClaimedJob, outcome: Outcome, error_code: str | None, run_seconds: float
    ) -> None:
        self.finished.labels(job.queue, outcome.value).inc()
        self.run_seconds.labels(job.queue, outcome.value).observe(run_seconds)
        if outcome is Outcome.RETRIED:
            self.retries.labels(job.queue, error_code or "UNKNOWN", attempt_label(job.attempt)).inc()

    def lease_lost(self, job: ClaimedJob, reason: str, code: str) -> None:
        self.leases_lost.labels(job.queue).inc()
        if code == "REVOKED":
            self.jobs_revoked.labels(job.queue).inc()

    def fencing_loss(self, job: ClaimedJob, code: str) -> None:
        self.fencing_losses.labels(job.queue).inc()

    def heartbeat_failed(self) -> None:
        self.heartbeat_failures.inc()

    def leases_recovered(self, leases: Sequence[RecoveredLease]) -> None:
        for lease in leases:
            to_state = "dead" if lease.state is JobState.DEAD else "pending"
            self.leases_expired.labels(lease.queue, to_state).inc()

"""Worker settings, validated once at start-up."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import InitVar, dataclass, field

from tenure.db.replication import sync_required
from tenure.model.errors import ConfigurationError
from tenure.model.outcomes import DEFAULT_MAX_RESULT_BYTES
from tenure.model.retry import Backoff
from tenure.model.validation import check_queue

#: The longest trickle_gap a worker takes (seconds): past it, jobs arriving one by one would wait
#: longer than a poll interval's worth for a claim.
MAX_TRICKLE_GAP = 1.0

#: Results are rows' values, read whole by every waiter: keep them well below jsonb's limits.
MAX_RESULT_BYTES_LIMIT = 64 * 1024 * 1024


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _check_optional_seconds(name: str, value: object, none_means: str | None = None) -> None:
    """A setting that is a positive number of seconds, or None (which means `none_means`)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        meaning = f" ({none_means})" if none_means else ""
        raise ConfigurationError(
            f"{name} must be a positive number of seconds or None{meaning}, got {value!r}"
        )


@dataclass
class WorkerOptions:
    """How one worker process claims and runs jobs.

    Attributes:
        queues: None runs every queue the registry's tasks use (or 'default').
        concurrency: the most jobs this worker runs at once.
        lease_seconds: the renewable lease; renewed only while the job reports progress.
        max_runtime_seconds: the hard limit after which a lease is never renewed.
        poll_interval: how often to claim with no notification, so jobs drain without LISTEN.
        claim_batch: the most jobs one claim takes; never more than the free slots. Each
            claim is a commit, so a claim takes every free slot up to this; the default lets
            a worker of up to 100 slots refill them all in one statement.
        trickle_gap: after a claim that took some jobs but fewer than it asked for (the queue
            emptied: jobs arrive one by one), how long from that claim's start the next one
            waits, in seconds. Jobs arriving meanwhile are taken together: longer gaps cost a
            job arriving under load up to the gap in latency and save each job the CPU of a claim
            of its own; 0 claims at every notification. An idle worker (its last claim found
            nothing) claims at once whatever this is.
        heartbeat_interval: seconds between heartbeats; None: a third of the lease.
        recovery_interval: seconds between recoveries of expired leases; None: half the lease,
            at most 5 s.
        recovery_batch: the most expired leases one recovery statement takes.
        recovery_backoff: the retry delay of a recovered job whose task this worker does not know.
        shutdown_grace: seconds running jobs get to finish after a stop before they are given back.
        listen: whether to LISTEN for new jobs; without it the worker only polls.
        worker_id: this worker's name: the owner of its leases, in job history and the workers list.
        completion_batch: the most completions one statement writes.
        queue_weights: each queue's share of the slots while queues compete; unnamed queues
            weigh 1. A queue always gets its share back as slots free; idle shares are lent out.
        oldest_every: one job in every `oldest_every` that this worker claims from a queue is the
            queue's oldest due job, whatever its priority: the starvation bound
            (docs/ordering.md). 1 claims in due order only; None claims by priority only.
        promotion_batch: the most scheduled jobs one promotion statement makes pending.
        statement_timeout: the bound on every statement the worker's own services run (claims,
            completions, heartbeats, recovery, ...), in seconds; past it the statement is cancelled
            on the server and retried. None derives it from the lease (a third, at most 10 s).
        service_failure_limit: how long a critical service (claimer, completer, heartbeat,
            recovery) may keep failing without one success before the worker stops and exits
            non-zero, so that a process supervisor restarts it.
        listen_dsn: where LISTEN connects, when the pool's DSN goes through a transaction pooler
            (PgBouncer) that cannot deliver notifications; None uses the pool's DSN.
        max_result_bytes: the largest handler result (its JSON) stored with a succeeded job; a
            larger one fails the job with RESULT_TOO_LARGE.
        require_sync_replication: report a completion done only once a synchronous standby has
            it (None: $TENURE_REQUIRE_SYNC_REPLICATION). Without a synchronous standby completions
            are not written (the worker claims nothing new meanwhile, as when the server is
            read-only); a completion committed on the primary that no standby confirmed is
            reported not replicated, not done (docs/guarantees.md, "Across a failover").
        vacuum_check_every: how often (seconds) the worker checks whether the jobs table holds
            more dead row versions than autovacuum's trigger for it, and vacuums it itself when it
            does (docs/operations.md, "Retention and bloat"); None leaves it to autovacuum.
        hand_off: whether an idle worker offers a slot to the next lone job enqueued into its
            queues, which that job takes inside its own INSERT and reaches the worker already
            claimed, without a claim's round trip (docs/hand-off.md). Needs LISTEN.
    """

    queues: list[str] | None = None
    concurrency: int = 10
    lease_seconds: float = 30.0
    max_runtime_seconds: float = 3600.0
    poll_interval: float = 1.0
    claim_batch: int = 100
    trickle_gap: float = 0.02
    heartbeat_interval: float | None = None
    recovery_interval: float | None = None
    recovery_batch: int = 1000
    recovery_backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, cap=300.0))
    shutdown_grace: float = 10.0
    listen: bool = True
    worker_id: str = field(default_factory=default_worker_id)
    completion_batch: int = 500
    queue_weights: dict[str, int] | None = None
    oldest_every: int | None = 10
    promotion_batch: int = 1000
    statement_timeout: float | None = None
    service_failure_limit: float = 120.0
    listen_dsn: str | None = None
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    require_sync_replication: bool | None = None
    vacuum_check_every: float | None = 5.0
    hand_off: bool = True
    # Removed: priority aging rewrote every waiting job; oldest_every bounds starvation instead.
    priority_aging_seconds: InitVar[float | None] = None
    priority_aging_max: InitVar[int | None] = None

    def __post_init__(self, priority_aging_seconds: float | None, priority_aging_max: int | None) -> None:
        if priority_aging_seconds is not None or priority_aging_max is not None:
            raise ConfigurationError(
                "priority_aging_seconds and priority_aging_max were removed: priority aging rewrote "
                "every waiting job. Starvation is bounded by oldest_every instead (one claim in "
                "every oldest_every takes the oldest due job, docs/ordering.md); drop the option"
            )
        if self.queues is not None:
            if not self.queues:
                raise ConfigurationError("queues is empty: name at least one queue, or leave it unset")
            for queue in self.queues:
                check_queue(queue)
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be an integer >= 1, got {self.concurrency!r}")
        for name in (
            "lease_seconds",
            "max_runtime_seconds",
            "poll_interval",
            "shutdown_grace",
            "service_failure_limit",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
        _check_optional_seconds("vacuum_check_every", self.vacuum_check_every, "autovacuum alone")
        _check_optional_seconds("heartbeat_interval", self.heartbeat_interval, "a third of the lease")
        _check_optional_seconds("statement_timeout", self.statement_timeout)
        if self.claim_batch < 1:
            raise ConfigurationError(f"claim_batch must be >= 1, got {self.claim_batch!r}")
        gap = self.trickle_gap
        if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 <= gap <= MAX_TRICKLE_GAP:
            raise ConfigurationError(
                f"trickle_gap must be a number of seconds from 0 to {MAX_TRICKLE_GAP}, got {gap!r}"
            )
        for queue, weight in (self.queue_weights or {}).items():
            check_queue(queue)
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ConfigurationError(f"queue weight of {queue!r} must be an integer >= 1, got {weight!r}")
        every = self.oldest_every
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ConfigurationError(
                f"oldest_every must be an integer >= 1 (1: due order only) or None (priority only), "
                f"got {every!r}"
            )
        limit = self.max_result_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RESULT_BYTES_LIMIT:
            raise ConfigurationError(
                f"max_result_bytes must be an integer from 1 to {MAX_RESULT_BYTES_LIMIT}, got {limit!r}"
            )
        self.require_sync_replication = sync_required(self.require_sync_replication)
        batch = self.promotion_batch
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigurationError(f"promotion_batch must be an integer >= 1, got {batch!r}")

    def weight(self, queue: str) -> int:
        return (self.queue_weights or {}).get(queue, 1)

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_interval or max(0.05, self.lease_seconds / 3)

    @property
    def recovery_every(self) -> float:
        return self.recovery_interval or max(0.1, min(5.0, self.lease_seconds / 2))

    @property
    def statement_bound(self) -> float:
        """Seconds any one statement of the worker's services may take."""
        return self.statement_timeout or max(0.5, min(10.0, self.lease_seconds / 3))

    @property
    def watchdog_every(self) -> float:
        """How often running jobs are checked against their lease's local expiry estimate."""
        return max(0.02, min(1.0, self.lease_seconds / 10))

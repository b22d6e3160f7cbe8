"""The gauges one snapshot of the queue holds: what a scrape, `tenure status` and `tenure check`
read, and how the snapshot's statements turn into them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenure.db.fetch import Row
from tenure.db.replication import ReplicationState

#: The window of the control-act gauge (tenure_control_acts_recent).
CONTROL_WINDOW_SECONDS = 900.0
#: The bounds of the jobs-without-worker gauge: the (task, queue) pairs it reports, first by
#: name, and how far it counts each one's jobs. Past them it says "at least": the statement
#: reads at most their product of index entries, whatever the backlog.
STRANDED_PAIRS_LIMIT = 50
STRANDED_COUNT_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """One queue's state at one instant (database time)."""

    queue: str
    scheduled: int
    pending: int
    oldest_claimable_at: datetime | None
    running: int
    leases_near_expiry: int
    dead: int
    oldest_dead_at: datetime | None
    db_now: datetime
    #: Jobs waiting for a signal or a time (gauge_waiting).
    waiting: int = 0

    @property
    def oldest_claimable_age(self) -> float:
        """Seconds the oldest claimable job has waited; 0 when nothing is claimable."""
        return (self.db_now - self.oldest_claimable_at).total_seconds() if self.oldest_claimable_at else 0.0

    @property
    def oldest_dead_age(self) -> float:
        """Seconds since the oldest unresolved dead job died; 0 when there is none."""
        return (self.db_now - self.oldest_dead_at).total_seconds() if self.oldest_dead_at else 0.0


@dataclass(frozen=True, slots=True)
class WorkerGauges:
    registered: int
    stale: int
    busy: int
    capacity: int
    lease_owners: int
    failing: int
    db_now: datetime


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a scrape, `tenure status` or `tenure check` reads, from one snapshot."""

    queues: list[QueueGauges]
    workers: WorkerGauges
    connections: list[Row]
    lock_waits: int
    longest_lock_wait: float
    paused: list[Row] = field(default_factory=list)
    """Queues paused now: queue, paused_seconds, until."""
    control_recent: list[Row] = field(default_factory=list)
    """Control acts (cancel, revoke, snooze, retry_now) of the last CONTROL_WINDOW_SECONDS."""
    limits: list[Row] = field(default_factory=list)
    """Limited queues: their limits and live leases now."""
    schedules: list[Row] = field(default_factory=list)
    """Schedules: name, paused, declared (by a live worker), since_last_fire_seconds."""
    replication: ReplicationState | None = None
    """Whether commits acknowledged now have a synchronous standby behind them."""
    without_worker: list[Row] = field(default_factory=list)
    """Waiting jobs no live worker can run, by task and queue: task, queue, jobs (counted up to
    STRANDED_COUNT_LIMIT), registered (by a live worker serving other queues), stranded_pairs
    (how many such pairs there are, of which STRANDED_PAIRS_LIMIT are listed)."""


#: The snapshot's statements, in the order `snapshot_of` reads their rows.
SNAPSHOT_QUERIES = (
    "gauge_queues",
    "gauge_workers",
    "gauge_connections",
    "gauge_lock_waits",
    "gauge_paused",
    "gauge_control_recent",
    "gauge_schedules",
    "queue_limits_list",
    "gauge_replication",
    "gauge_jobs_without_worker",
    "gauge_waiting",
)
#: Statements of the snapshot that need a migration a worker may run without (the worker's
#: metrics endpoint reads the gauges on any schema it runs on): on an older schema they read as
#: no rows instead of failing the whole scrape.
NEWER_THAN_WORKER_FLOOR = frozenset({"gauge_jobs_without_worker", "gauge_waiting"})


def snapshot_params(near_expiry: float, stale: float, now: datetime | None) -> dict[str, Any]:
    return {
        "near_expiry_seconds": near_expiry,
        "stale_seconds": stale,
        "control_window_seconds": CONTROL_WINDOW_SECONDS,
        "pairs_limit": STRANDED_PAIRS_LIMIT,
        "count_limit": STRANDED_COUNT_LIMIT,
        "now": now,
    }


def snapshot_of(results: list[list[Row]]) -> Snapshot:
    """The Snapshot of the rows of SNAPSHOT_QUERIES, in their order."""
    queues, workers, connections, locks, paused, control, schedules, limits, replication, stranded, waits = (
        results
    )
    waiting = {r["queue"]: int(r["waiting"]) for r in waits}
    db_now = workers[0]["db_now"]
    # A queue whose only jobs wait has no row of its own in gauge_queues.
    rows = queues + [
        {"queue": q, "scheduled": 0, "pending": 0, "oldest_claimable_at": None, "running": 0,
         "leases_near_expiry": 0, "dead": 0, "oldest_dead_at": None, "db_now": db_now}
        for q in sorted(set(waiting) - {r["queue"] for r in queues})
    ]  # fmt: skip
    return Snapshot(
        queues=sorted(
            (QueueGauges(**r, waiting=waiting.get(r["queue"], 0)) for r in rows), key=lambda g: g.queue
        ),
        workers=WorkerGauges(**workers[0]),
        connections=connections,
        lock_waits=int(locks[0]["waiting"]),
        longest_lock_wait=float(locks[0]["longest_seconds"]),
        paused=paused,
        control_recent=control,
        schedules=schedules,
        limits=limits,
        replication=ReplicationState(**replication[0]),
        without_worker=stranded,
    )

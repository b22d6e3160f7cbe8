"""Database gauges, computed once per scrape for the whole cluster from one snapshot."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tenure.db.gauges import CONTROL_WINDOW_SECONDS, STRANDED_COUNT_LIMIT, STRANDED_PAIRS_LIMIT, Snapshot
from tenure.db.sync.gauge_queries import GaugeQueries

log = logging.getLogger("tenure.metrics")


class DatabaseCollector(Collector):
    """Reads the gauges on each scrape through one dedicated connection, reopened after an error.

    A failed scrape yields `tenure_db_up 0` and no stale values: a gauge that cannot be read is
    absent, never frozen at its last value.
    """

    def __init__(
        self,
        dsn: str,
        schema: str = "tenure",
        *,
        near_expiry_seconds: float = 10.0,
        stale_seconds: float = 60.0,
        application_name: str = "tenure-metrics",
    ) -> None:
        self.dsn = dsn
        self.queries = GaugeQueries(schema)
        self.near_expiry_seconds = near_expiry_seconds
        self.stale_seconds = stale_seconds
        self.application_name = application_name
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=5,
                application_name=self.application_name,
                # A scrape every few seconds gains nothing from prepared statements, and none is
                # safe through a pooler that does not carry them.
                prepare_threshold=None,
            )
        return self._conn

    def read(self) -> Snapshot:
        with self._lock:
            try:
                conn = self._connection()
                with self.queries.snapshot(conn):
                    return self.queries.read_gauges(
                        conn, near_expiry_seconds=self.near_expiry_seconds, stale_seconds=self.stale_seconds
                    )
            except psycopg.Error:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        started = time.perf_counter()
        up = GaugeMetricFamily("tenure_db_up", "1 when the last scrape could read the database")
        try:
            snap = self.read()
        except psycopg.Error as exc:
            log.warning("metrics scrape could not read the database: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from self._families(snap)
        took = GaugeMetricFamily("tenure_db_scrape_seconds", "How long reading the database gauges took")
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _families(self, snap: Snapshot) -> Iterator[GaugeMetricFamily]:
        def per_queue(name: str, doc: str, attr: str) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for q in snap.queues:
                value = getattr(q, attr)
                family.add_metric([q.queue], float(value))
            return family

        jobs = GaugeMetricFamily(
            "tenure_jobs", "Jobs in a live or dead state, by queue and state", labels=["queue", "state"]
        )
        for q in snap.queues:
            for state in ("scheduled", "pending", "running", "waiting", "dead"):
                jobs.add_metric([q.queue, state], float(getattr(q, state)))
        yield jobs
        yield per_queue(
            "tenure_oldest_claimable_age_seconds",
            "Age of the oldest job that could run now but has not been claimed (0: none waiting)",
            "oldest_claimable_age",
        )
        yield per_queue("tenure_dead_jobs", "Dead jobs not reprocessed or purged", "dead")
        yield per_queue(
            "tenure_oldest_dead_age_seconds",
            "Time since the oldest unresolved dead job died (0: none)",
            "oldest_dead_age",
        )
        yield per_queue(
            "tenure_leases_near_expiry",
            f"Running jobs whose lease expires within {self.near_expiry_seconds:g}s (or already has)",
            "leases_near_expiry",
        )
        workers = snap.workers
        for name, doc, value in (
            ("tenure_workers_registered", "Worker processes in the registry", workers.registered),
            (
                "tenure_workers_stale",
                f"Registered workers silent for over {self.stale_seconds:g}s",
                workers.stale,
            ),
            ("tenure_workers_lease_owners", "Distinct owners of running leases", workers.lease_owners),
            (
                "tenure_workers_failing",
                "Registered workers reporting a service that keeps failing",
                workers.failing,
            ),
            ("tenure_workers_busy_slots", "Busy slots over all registered workers", workers.busy),
            ("tenure_workers_capacity_slots", "Slots over all registered workers", workers.capacity),
            ("tenure_db_lock_waits", "Sessions on Tenure's database waiting for a lock now", snap.lock_waits),
            ("tenure_db_longest_lock_wait_seconds", "The longest current lock wait", snap.longest_lock_wait),
        ):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], float(value))
            yield family
        paused = GaugeMetricFamily(
            "tenure_queue_paused_seconds",
            "Queues paused now, by how long they have been paused; absent when not paused",
            labels=["queue"],
        )
        for row in snap.paused:
            paused.add_metric([row["queue"]], float(row["paused_seconds"]))
        yield paused
        acts = GaugeMetricFamily(
            "tenure_control_acts_recent",
            f"Cancels, revokes, snoozes and retries-now of the last {CONTROL_WINDOW_SECONDS:g}s, by queue",
            labels=["queue", "act"],
        )
        for row in snap.control_recent:
            acts.add_metric([row["queue"], row["event"]], float(row["n"]))
        yield acts
        yield from _schedule_families(snap)
        yield from _replication_families(snap)
        yield _without_worker_family(snap, self.stale_seconds)
        limited = GaugeMetricFamily(
            "tenure_queue_limit_running",
            "Live leases of a queue with a global limit, against its max_running (label limit)",
            labels=["queue", "limit"],
        )
        for row in snap.limits:
            bound = "none" if row["max_running"] is None else str(row["max_running"])
            limited.add_metric([row["queue"], bound], float(row["running"]))
        yield limited
        connections = GaugeMetricFamily(
            "tenure_db_connections",
            "Sessions Tenure opened on the database (application_name tenure*), by application and state",
            labels=["application", "state"],
        )
        for row in snap.connections:
            connections.add_metric([row["application"], row["state"]], float(row["connections"]))
        yield connections


def _replication_families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """Whether commits acknowledged now have a synchronous standby behind them: 1 for the state
    the primary is in (synchronous, asynchronous, waiting, none, standby, unknown), and the
    synchronous standbys connected (absent when the role cannot see them)."""
    replication = snap.replication
    if replication is None:
        return
    state = GaugeMetricFamily(
        "tenure_db_replication",
        "1 for the primary's replication state: synchronous, asynchronous (standbys, but commits "
        "acknowledged without them), waiting (commits wait for an absent synchronous standby), "
        "none (no replication), standby, unknown",
        labels=["state"],
    )
    state.add_metric([replication.verdict.value], 1.0)
    yield state
    unprotected = GaugeMetricFamily(
        "tenure_db_commits_unprotected",
        "1 while the primary has standbys but acknowledges commits without a synchronous one, or "
        "makes commits wait for one that is absent; 0 otherwise (a single server is 0)",
    )
    unprotected.add_metric([], 1.0 if replication.unprotected else 0.0)
    yield unprotected
    if replication.stats_visible:
        sync = GaugeMetricFamily(
            "tenure_db_synchronous_standbys", "Standbys counted synchronous by the primary now"
        )
        sync.add_metric([], float(replication.synchronous))
        yield sync


def _without_worker_family(snap: Snapshot, stale_seconds: float) -> GaugeMetricFamily:
    """Waiting jobs that no live worker can run, by task and queue: absent when there are none."""
    family = GaugeMetricFamily(
        "tenure_jobs_without_worker",
        "Scheduled and pending jobs whose task no worker seen in the last "
        f"{stale_seconds:g}s registers together with their queue, by queue and task (counted up to "
        f"{STRANDED_COUNT_LIMIT} each, for the first {STRANDED_PAIRS_LIMIT} tasks and queues by name)",
        labels=["queue", "task"],
    )
    for row in snap.without_worker:
        family.add_metric([row["queue"], row["task"]], float(row["jobs"]))
    return family


def _schedule_families(snap: Snapshot) -> Iterator[GaugeMetricFamily]:
    """How many schedules are active, paused or declared by no live worker, and how long ago each
    last fired: compare it with the schedule's own interval to see one that stopped firing."""
    states = GaugeMetricFamily(
        "tenure_schedules",
        "Registered schedules, by state: active, paused, undeclared",
        labels=["state"],
    )
    counts = {"active": 0, "paused": 0, "undeclared": 0}
    for row in snap.schedules:
        counts["undeclared" if not row["declared"] else "paused" if row["paused"] else "active"] += 1
    for state, n in counts.items():
        states.add_metric([state], float(n))
    yield states
    since = GaugeMetricFamily(
        "tenure_schedule_last_fire_age_seconds",
        "Seconds since each schedule's last fired slot; absent until it first fires",
        labels=["schedule"],
    )
    for row in snap.schedules:
        if row["since_last_fire_seconds"] is not None:
            since.add_metric([row["name"]], float(row["since_last_fire_seconds"]))
    yield since

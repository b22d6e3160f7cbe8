"""How long finished jobs, audit rows and (only when asked) dead jobs are kept, and the pass
that deletes what is older."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tenure.db.ops_queries import OpsQueries
from tenure.db.schedule_queries import ScheduleQueries
from tenure.model.errors import ConfigurationError
from tenure.model.validation import check_queue

DAY = 86400.0


@dataclass(frozen=True)
class RetentionPolicy:
    """finished_seconds: succeeded and cancelled jobs are kept this long after they finished,
    unless `per_queue` names their queue. audit_seconds: audit rows of jobs no longer in play,
    and the fired-slot history of schedules.
    dead_seconds: None keeps dead jobs until an operator purges them (the default).
    batch / max_batches bound the work of one pass, so a pass never holds locks for long."""

    finished_seconds: float = 7 * DAY
    per_queue: dict[str, float] = field(default_factory=dict)
    audit_seconds: float = 30 * DAY
    dead_seconds: float | None = None
    silent_worker_seconds: float = DAY
    batch: int = 1000
    max_batches: int = 20

    def __post_init__(self) -> None:
        for name in ("finished_seconds", "audit_seconds", "silent_worker_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.dead_seconds is not None and self.dead_seconds <= 0:
            raise ConfigurationError(f"dead_seconds must be positive or None, got {self.dead_seconds!r}")
        for queue, seconds in self.per_queue.items():
            check_queue(queue)
            if seconds <= 0:
                raise ConfigurationError(f"retention of queue {queue!r} must be positive, got {seconds!r}")
        if self.batch < 1 or self.max_batches < 1:
            raise ConfigurationError("batch and max_batches must be >= 1")


@dataclass
class PruneReport:
    finished_jobs: int = 0
    audit_rows: int = 0
    dead_jobs: int = 0
    silent_workers: int = 0
    schedule_fires: int = 0
    workflows: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


#: One batch of one kind of row: deletes at most `limit` rows and says how many it deleted.
PruneBatch = Callable[[AsyncConnection[Any], int], Awaitable[int]]


async def _in_batches(pool: AsyncConnectionPool[Any], policy: RetentionPolicy, batch: PruneBatch) -> int:
    """Runs `batch` in its own short transaction until one comes back short or `max_batches` ran."""
    total = 0
    for _ in range(policy.max_batches):
        async with pool.connection() as conn:
            deleted = await batch(conn, policy.batch)
        total += deleted
        if deleted < policy.batch:
            break
    return total


async def prune(
    pool: AsyncConnectionPool[Any],
    schema: str,
    policy: RetentionPolicy,
    *,
    now: datetime | None = None,
) -> PruneReport:
    """One maintenance pass: each kind of row in batches (one short transaction each) until a
    batch comes back short or `max_batches` ran."""
    ops = OpsQueries(schema)
    fires = ScheduleQueries(schema)

    async def finished_jobs(conn: AsyncConnection[Any], limit: int) -> int:
        ids = await ops.jobs_prune_finished(
            conn, default_seconds=policy.finished_seconds, per_queue=policy.per_queue, limit=limit, now=now
        )
        return len(ids)

    async def audit_rows(conn: AsyncConnection[Any], limit: int) -> int:
        return await ops.job_events_prune(conn, seconds=policy.audit_seconds, limit=limit, now=now)

    async def schedule_fires(conn: AsyncConnection[Any], limit: int) -> int:
        return await fires.prune_fires(conn, seconds=policy.audit_seconds, limit=limit, now=now)

    report = PruneReport(finished_jobs=await _in_batches(pool, policy, finished_jobs))
    dead_seconds = policy.dead_seconds
    if dead_seconds is not None:

        async def dead_jobs(conn: AsyncConnection[Any], limit: int) -> int:
            return len(await ops.dead_purge(conn, older_than=dead_seconds, limit=limit, now=now))

        report.dead_jobs = await _in_batches(pool, policy, dead_jobs)
    report.audit_rows = await _in_batches(pool, policy, audit_rows)
    report.schedule_fires = await _in_batches(pool, policy, schedule_fires)

    async def workflows(conn: AsyncConnection[Any], limit: int) -> int:
        return await ops.workflows_prune_finished(conn, seconds=policy.finished_seconds, limit=limit, now=now)

    # A schema older than workflows (an upgrade under running workers) has none to prune.
    with contextlib.suppress(psycopg.errors.UndefinedTable):
        report.workflows = await _in_batches(pool, policy, workflows)
    async with pool.connection() as conn:
        report.silent_workers = await ops.workers_prune_silent(
            conn, seconds=policy.silent_worker_seconds, now=now
        )
    return report

"""The worker's own maintenance passes, stepped by hand: lease recovery and promotion as a worker
runs them, on a small pool of their own, at a database time of the caller's choosing where it
wants to skip ahead.

The bench times them, and the soak recovers with them every lease its stopped workers left. Neither
runs a whole worker for it: a worker would claim the jobs as well. The library has no public face
for a single pass, so this is the one place the lab reaches into the worker's services."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tenure import Backoff, WorkerOptions
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.worker.promoter import Promoter
from tenure.worker.recovery import Recovery
from tenure.worker.services import WorkerServices


@dataclass(frozen=True)
class WorkerPasses:
    recovery: Recovery
    promoter: Promoter


@contextlib.asynccontextmanager
async def worker_passes(
    dsn: str, schema: str, *, name: str, options: WorkerOptions | None = None
) -> AsyncIterator[WorkerPasses]:
    """A worker's recovery and promotion passes with `options` (a worker's defaults by default),
    their sessions named `name`; the pool closes with the block."""
    pool = await open_pool(dsn, min_size=1, max_size=2, name=name)
    try:
        services = WorkerServices(
            pool=pool, queries=Queries(schema), options=options or WorkerOptions(), dsn=dsn
        )
        yield WorkerPasses(Recovery(services), Promoter(services))
    finally:
        await pool.close()


async def recover_at_once(dsn: str, schema: str, *, name: str) -> int:
    """Recovers every expired lease, each job due again at once rather than after a backoff (no
    worker is left to wait for it); how many it recovered."""
    at_once = WorkerOptions(recovery_backoff=Backoff(base=0.0, cap=0.0, jitter=0.0))
    async with worker_passes(dsn, schema, name=name, options=at_once) as passes:
        return len(await passes.recovery.run_once())

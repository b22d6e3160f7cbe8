"""`JobRunner`: the worker's own claim, executor and completer, run one job at a time on demand.

Async, in the loop of whoever runs it: the test's own for `Inline`, a loop thread's for
`SyncInline`. It claims only the app's tasks, with their lease policies and within their queue's
limits, as a worker of the app would; and when a chosen job cannot be claimed, it says why.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from tenure.db.connect import resolve_dsn
from tenure.db.control_queries import ControlQueries
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.db.wait_queries import WaitQueries
from tenure.model.errors import ValidationError
from tenure.model.jobs import Job
from tenure.testing.outcome import Ran
from tenure.testing.queries import TestingQueries
from tenure.worker.claimer import ClaimTerms
from tenure.worker.completer import Completer
from tenure.worker.executor import Executor
from tenure.worker.options import WorkerOptions
from tenure.worker.service import Supervisor
from tenure.worker.services import WorkerServices
from tenure.worker.workflow_pass import WORKFLOW_CHUNK

if TYPE_CHECKING:
    from tenure.app import Tenure

#: Seconds a job run inline may take before run_job gives up on it.
RUN_TIMEOUT = 60.0
#: Where a test whose jobs another worker takes is sent.
ISOLATE = (
    "give the tests a schema of their own: tenure's pytest fixtures (tenure_app, tenure_inline, "
    "tenure_inline_sync) do, see docs/testing.md"
)


class JobRunner:
    """Claims and runs one job at a time of `app`'s tasks, through the worker's statements."""

    def __init__(self, app: Tenure, *, lease_seconds: float = 30.0) -> None:
        self.app = app
        self.options = WorkerOptions(
            worker_id=f"tenure-testing-{uuid.uuid4().hex[:8]}", lease_seconds=lease_seconds
        )
        self.terms = ClaimTerms.of(app.registry, self.options, self.options.worker_id)
        self._pool: AsyncConnectionPool[Any] | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._supervisor = Supervisor()
        self._executor: Executor | None = None

    async def open(self) -> None:
        schema = self.app.schema
        dsn = resolve_dsn(self.app.dsn).dsn
        self.queries = Queries(schema)
        self.control = ControlQueries(schema)
        self.testing = TestingQueries(schema)
        self.waits = WaitQueries(schema)
        self._pool = await open_pool(dsn, min_size=1, max_size=4, name="tenure-testing")
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tenure-testing")
        services = WorkerServices(pool=self._pool, queries=self.queries, options=self.options, dsn=dsn)
        completer = Completer(services)
        self._supervisor.start(completer)
        self._executor = Executor(services, self.app.registry, completer, self._threads)

    async def close(self) -> None:
        await self._supervisor.close()
        if self._threads is not None:
            self._threads.shutdown(wait=False)
        if self._pool is not None:
            await self._pool.close()

    def _opened(self) -> tuple[AsyncConnectionPool[Any], Executor]:
        if self._pool is None or self._executor is None:
            raise RuntimeError("use Inline(app) as a context manager: `async with Inline(app) as t:`")
        return self._pool, self._executor

    async def job(self, job_id: int) -> Job | None:
        pool, _ = self._opened()
        async with pool.connection() as conn:
            return await self.queries.job_get(conn, job_id)

    async def workflow_work(self) -> int:
        """Does the workflow work the last completions left for the workflow pass (a fan-out's
        release past 64 children, the steps after a dead step with many followers), chunk by
        chunk, as a worker's pass would: how many chunks ran."""
        pool, _ = self._opened()
        chunks = 0
        while True:
            async with pool.connection() as conn:
                work = await self.queries.workflow_work_run(conn, chunk=WORKFLOW_CHUNK)
            if work is None or work.outcome == "busy":
                return chunks
            chunks += 1

    async def end_waits_within(self, after: timedelta) -> int:
        """Ends, timed out, every wait whose deadline falls within `after` from now (database
        time), as the promotion pass would once that time had passed: how many."""
        pool, _ = self._opened()
        ended = 0
        async with pool.connection() as conn:
            at = await self.control.db_now(conn) + after
            while (batch := await self.waits.expire_due(conn, limit=1000, now=at)).timed_out:
                ended += batch.timed_out
        return ended

    async def due_queues(self, queue: str | None) -> list[str]:
        """The queues with a due job of the app's tasks (`queue` alone, when given)."""
        pool, _ = self._opened()
        async with pool.connection() as conn:
            return await self.testing.due_queues(conn, tasks=self.terms.tasks, queue=queue)

    async def run_next(self, queue: str, only: list[int] | None = None) -> Ran | None:
        """Claims the next job of `queue` a worker of the app would (of `only`, when given) and
        runs it to its outcome; None when there is none to claim."""
        pool, executor = self._opened()
        async with pool.connection() as conn:
            limited = queue in {r.queue for r in await self.control.limits(conn)}
            sent_at = time.monotonic()
            claimed = await self.terms.claim(self.queries, conn, queue, 1, limited=limited, only=only)
        if not claimed:
            return None
        job = claimed[0]
        # Ended once its outcome is written (the completer's, or a failure's).
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def end() -> None:
            if not ended.done():
                ended.set_result(None)

        executor.start(job, lambda: None, sent_at, on_end=end)
        await asyncio.wait_for(asyncio.shield(ended), RUN_TIMEOUT)
        # A job completed in its own transaction (ctx.atomic) stores its result just after.
        await executor.services.settled(timeout=RUN_TIMEOUT)
        stored = await self.job(job.id)
        assert stored is not None
        return Ran(stored)

    async def run_job(self, job_id: int) -> Ran:
        """Claims that one job and runs it; refuses, saying why, a job a worker of the app would
        not claim now."""
        job = await self.job(job_id)
        if job is None:
            raise ValidationError(f"there is no job {job_id}")
        if job.task not in self.terms.tasks:
            raise ValidationError(
                f"job {job_id} is of task {job.task!r}, which this app does not register: a worker of "
                "the app would not run it either (register the task with @app.task, or check its name)"
            )
        if job.state != "pending":
            raise ValidationError(
                f"job {job_id} is {job.state}, not pending: only a due waiting job can run"
                + (f" ({_taken_by(job)})" if job.state == "running" else "")
            )
        ran = await self.run_next(job.queue, only=[job_id])
        if ran is None:
            raise ValidationError(f"job {job_id} could not be claimed: {await self._why_not_claimed(job)}")
        return ran

    async def _why_not_claimed(self, job: Job) -> str:
        """Why the claim passed over a job that was pending just before: read again, not guessed."""
        now = await self.job(job.id)
        if now is None:
            return "it was deleted meanwhile (pruned, or its schema emptied by another process)"
        if now.state != "pending":
            return f"it is {now.state} now: {_taken_by(now)}"
        pool, _ = self._opened()
        async with pool.connection() as conn:
            pauses = {p.queue: p for p in await self.control.pauses(conn)}
            limits = {r.queue: r for r in await self.control.limits(conn)}
        if now.queue in pauses:
            return f"its queue {now.queue!r} is paused (resume it with app.resume_queue)"
        if now.queue in limits:
            return f"its queue {now.queue!r} is at its limit ({_limit(limits[now.queue])})"
        if now.ordering_key is not None:
            return (
                f"an earlier job of its ordering key {now.ordering_key!r} has not finished "
                "(waiting, running or dead)"
            )
        if now.available_at > datetime.now(UTC):
            return f"it is not due before {now.available_at.isoformat()}"
        return (
            "its row is locked by another transaction: a worker running on this schema is claiming "
            f"it right now; {ISOLATE}"
        )


def _taken_by(job: Job) -> str:
    owner = f" by {job.lease_owner}" if job.lease_owner else ""
    return (
        f"another worker took it{owner}, so one is running on this schema ({job.queue!r} is among its "
        f"queues); {ISOLATE}"
        if not (job.lease_owner or "").startswith("tenure-testing-")
        else f"it was run here already{owner}"
    )


def _limit(limit: Any) -> str:
    parts = []
    if limit.max_running is not None:
        parts.append(f"at most {limit.max_running} running")
    if limit.max_running_per_key is not None:
        parts.append(f"at most {limit.max_running_per_key} per {limit.key_field}")
    if limit.rate is not None:
        parts.append(f"at most {limit.rate} starts per {limit.per_seconds:g}s")
    return ", ".join(parts) or "limited"

"""Helpers for an application's own tests, on a real database: assert what was enqueued, run a
job's handler now, inline, and drive a workflow step by step, all without starting a worker.

    async with tenure.testing.Inline(app) as t:
        await place_order(8, "b@c.d")
        [job] = await t.assert_enqueued(send_receipt, order_id=8)
        ran = await t.run_job(job.id)
        assert ran.state == "succeeded"

A job runs as a worker runs it: through the claim statement (a real lease and fencing token),
the worker's executor (its context, `ctx.atomic`, `ctx.effect`, its failure policy) and its
fenced outcome. Only the loops are missing: nothing claims on its own, and nothing runs in the
background but the completer that writes outcomes. See docs/testing.md.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from tenure.db.connect import resolve_dsn
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.model.errors import ValidationError
from tenure.model.jobs import Job
from tenure.tasks import AnyTask
from tenure.worker.completer import Completer
from tenure.worker.executor import Executor
from tenure.worker.options import WorkerOptions
from tenure.worker.service import Supervisor
from tenure.worker.services import WorkerServices

if TYPE_CHECKING:
    from tenure.app import Tenure

#: Seconds a job run inline may take before run_job gives up on it.
RUN_TIMEOUT = 60.0
WAITING = ("scheduled", "pending")


@dataclass(frozen=True)
class Ran:
    """A job run inline, as stored once its outcome was written."""

    job: Job

    @property
    def state(self) -> str:
        """succeeded; pending or scheduled (a retry); dead; cancelled."""
        return str(self.job.state)

    @property
    def result(self) -> Any:
        return self.job.result

    @property
    def error(self) -> str | None:
        """The job's last error as one line, its code first (`NO_TEMPLATE: ...Permanent: the
        template is missing`), or None; `job.last_error` keeps the whole traceback."""
        if self.job.last_error_code is None:
            return None
        lines = [line.strip() for line in (self.job.last_error or "").splitlines() if line.strip()]
        return f"{self.job.last_error_code}: {lines[-1] if lines else ''}"


class Inline:
    """Runs an app's jobs in the test's own process and event loop, one at a time, on demand."""

    def __init__(self, app: Tenure, *, lease_seconds: float = 30.0) -> None:
        self.app = app
        self.options = WorkerOptions(
            worker_id=f"tenure-testing-{uuid.uuid4().hex[:8]}", lease_seconds=lease_seconds
        )
        self._pool: AsyncConnectionPool[Any] | None = None
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tenure-testing")
        self._supervisor = Supervisor()
        self._executor: Executor | None = None
        self._services: WorkerServices | None = None

    async def __aenter__(self) -> Inline:
        dsn = resolve_dsn(self.app.dsn).dsn
        self._pool = await open_pool(dsn, min_size=1, max_size=4, name="tenure-testing")
        services = WorkerServices(
            pool=self._pool, queries=Queries(self.app.schema), options=self.options, dsn=dsn
        )
        completer = Completer(services)
        self._supervisor.start(completer)
        self._executor = Executor(services, self.app.registry, completer, self._threads)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._supervisor.close()
        if self._services is not None:
            await self._services.close()
        self._threads.shutdown(wait=False)
        if self._pool is not None:
            await self._pool.close()
        await self.app.close()

    # -- what was enqueued --------------------------------------------------------------------

    async def enqueued(
        self,
        task: str | AnyTask | None = None,
        *,
        queue: str | None = None,
        states: Sequence[str] = WAITING,
        **payload: Any,
    ) -> list[Job]:
        """Jobs of `task` (any, when None) on `queue` whose payload holds every `payload`
        argument given, in `states` (waiting by default), oldest first."""
        return await self.app.client.find_jobs(task, queue=queue, states=states, contains=payload or None)

    async def assert_enqueued(
        self, task: str | AnyTask, *, queue: str | None = None, count: int | None = None, **payload: Any
    ) -> list[Job]:
        """The waiting jobs of `task` with that payload; raises AssertionError, listing what the
        task has waiting, when there is none (or not `count` of them)."""
        found = await self.enqueued(task, queue=queue, **payload)
        if (count is None and not found) or (count is not None and len(found) != count):
            others = await self.enqueued(task)
            want = "a job" if count is None else f"{count} jobs"
            raise AssertionError(
                f"expected {want} of {_name(task)} with {payload or 'any payload'} waiting"
                f"{f' on queue {queue!r}' if queue else ''}, found {len(found)}; the task's waiting jobs: "
                + (", ".join(f"{j.id} {j.queue} {j.payload}" for j in others[:10]) or "none")
            )
        return found

    async def refute_enqueued(self, task: str | AnyTask, *, queue: str | None = None, **payload: Any) -> None:
        """Raises AssertionError, naming them, when jobs of `task` with that payload wait."""
        found = await self.enqueued(task, queue=queue, **payload)
        if found:
            raise AssertionError(
                f"expected no job of {_name(task)} with {payload or 'any payload'} waiting, found "
                + ", ".join(f"{j.id} {j.payload}" for j in found[:10])
            )

    # -- running jobs ---------------------------------------------------------------------------

    async def run_job(self, job_id: int) -> Ran:
        """Claims that one job and runs it now; returns it as its outcome left it. The job must
        be pending (a scheduled job is not due yet: its run time is in the database)."""
        job = await self.app.client.get_job(job_id)
        if job is None:
            raise ValidationError(f"there is no job {job_id}")
        if job.state != "pending":
            raise ValidationError(f"job {job_id} is {job.state}, not pending: only a due waiting job can run")
        ran = await self._claim_and_run(job.queue, only=[job_id])
        if ran is None:
            raise ValidationError(
                f"job {job_id} could not be claimed: its queue {job.queue!r} is paused, or an earlier job "
                "of its ordering key has not finished"
            )
        return ran

    async def perform(self, task: AnyTask, /, **payload: Any) -> Ran:
        """Enqueues a job of `task` with these arguments and runs it at once."""
        enqueued = await self.app.client.enqueue(task, payload)
        return await self.run_job(enqueued.id)

    async def drain(self, queue: str | None = None, *, limit: int = 1000) -> list[Ran]:
        """Runs due jobs of `queue` (every queue, when None), one at a time in the order workers
        would claim them, until none is due: the jobs they enqueue, retries due at once and
        workflow steps they release run too. At most `limit` runs."""
        runs: list[Ran] = []
        while len(runs) < limit:
            waiting = await self.enqueued(queue=queue, states=("pending",))
            queues = list(dict.fromkeys(j.queue for j in waiting))
            ran = None
            for name in queues:
                ran = await self._claim_and_run(name)
                if ran is not None:
                    runs.append(ran)
                    break
            if ran is None:
                return runs
        return runs

    async def run_workflow(self, workflow_id: int, *, steps: int | None = None) -> list[Ran]:
        """Runs the workflow's released steps that are due, each once, and the steps they release
        in turn, until none is left to run or `steps` have run (one at a time: steps=1 is one
        step). Returns what ran, in order."""
        runs: list[Ran] = []
        while steps is None or len(runs) < steps:
            ready = [
                s for s in await self.app.client.workflow_steps(workflow_id) if s.shown_state == "pending"
            ]
            if not ready:
                break
            runs.append(await self.run_job(ready[0].job_id))
        return runs

    async def _claim_and_run(self, queue: str, only: list[int] | None = None) -> Ran | None:
        assert self._executor is not None and self._pool is not None, "use `async with Inline(app)`"
        executor = self._executor
        options = self.options
        async with self._pool.connection() as conn:
            sent_at = time.monotonic()
            claimed = await executor.services.queries.job_claim(
                conn,
                queue=queue,
                owner=options.worker_id,
                limit=1,
                default_lease_seconds=options.lease_seconds,
                default_runtime_seconds=options.max_runtime_seconds,
                only=only,
            )
        if not claimed:
            return None
        job = claimed[0]
        execution = executor.start(job, lambda: None, sent_at)
        assert execution.task is not None
        # The execution's task ends once its outcome is written (the completer's, or a failure's).
        await asyncio.wait_for(asyncio.shield(execution.task), RUN_TIMEOUT)
        # A job completed in its own transaction (ctx.atomic) stores its result just after.
        await executor.services.settled(timeout=RUN_TIMEOUT)
        stored = await self.app.client.get_job(job.id)
        assert stored is not None
        return Ran(stored)


def _name(task: str | AnyTask) -> str:
    return task if isinstance(task, str) else task.name

"""The workflow pass: the part of a workflow's work that its completions left for later, because
it grows with the workflow's size (a fan-out's children, the steps after a dead root, a fan-in's
input gathered from many parents). Every worker runs it; many at once is safe (each chunk takes
its work row with SKIP LOCKED), and each chunk is a short transaction of its own."""

from __future__ import annotations

import logging

from tenure.db.queries import WorkflowWork
from tenure.worker.service import Service
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: Steps one chunk handles: a chunk of a 100,000-child fan-out's release takes tens of
#: milliseconds, a small part of any statement bound, on tables never analyzed.
WORKFLOW_CHUNK = 500
#: Chunks one pass runs before it yields to the next pass (and the worker's other services).
CHUNKS_PER_PASS = 20


class WorkflowPass(Service):
    """Runs chunks of workflow work while there are some, then sleeps the poll interval."""

    name = "workflow pass"

    def __init__(self, services: WorkerServices, *, chunk: int = WORKFLOW_CHUNK) -> None:
        self.services = services
        self.chunk = chunk
        # Not critical: a workflow whose work keeps failing must not stop the worker's jobs.
        self.health = services.health.service(self.name, critical=False)

    async def run_once(self) -> list[WorkflowWork]:
        """Up to CHUNKS_PER_PASS chunks, each in its own transaction; what each did."""
        done: list[WorkflowWork] = []
        for _ in range(CHUNKS_PER_PASS):
            async with self.services.connection() as conn:
                work = await self.services.queries.workflow_work_run(conn, chunk=self.chunk)
            if work is None:
                break
            done.append(work)
        if any(w.outcome == "busy" for w in done):
            log.info("workflow pass: a step row is locked elsewhere; that workflow's work waits a second")
        return done

    def next_delay(self, result: list[WorkflowWork]) -> float:
        busy_only = result and all(w.outcome == "busy" for w in result)
        if len(result) == CHUNKS_PER_PASS and not busy_only:
            return 0.0  # more is waiting
        return self.services.options.poll_interval

"""Typed access to the workflow queries (workflows.sql): enqueueing a workflow, reading it, and
cancelling or retrying it through the job-control statements every job's control uses. Written
once, async; tools/async_to_sync.py writes its blocking twin (tenure.db.sync.workflow_queries)."""

from __future__ import annotations

import asyncio
import time  # noqa: F401 - the blocking twin sleeps with it
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.control_queries import ControlQueries
from tenure.db.fetch import fetch, fetch_as
from tenure.db.sqlfiles import named_queries
from tenure.db.text import storable_text
from tenure.model.workflows import EnqueuedWorkflow, WorkflowCancel, WorkflowStep, WorkflowSummary

ASYNC = True

#: Times a cancel is tried when it deadlocks with a completion.
CANCEL_ATTEMPTS = 5


class WorkflowQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)
        self.control = ControlQueries(schema)

    async def enqueue(
        self, conn: AsyncConnection[Any], *, name: str, on_dead: str, steps: list[dict[str, Any]]
    ) -> EnqueuedWorkflow:
        """Writes the workflow in `conn`'s transaction; its root steps become jobs at once."""
        params = {"name": name, "on_dead": on_dead, "steps": Jsonb(steps)}
        rows = await fetch(conn, self._sql["workflow_enqueue"], params)
        return EnqueuedWorkflow(rows[0]["workflow_id"], {r["step"]: r["job_id"] for r in rows})

    async def latest(self, conn: AsyncConnection[Any], *, limit: int = 50) -> list[WorkflowSummary]:
        """The latest workflows, newest first."""
        return await fetch_as(conn, WorkflowSummary, self._sql["workflow_list"], {"limit": limit})

    async def get(self, conn: AsyncConnection[Any], workflow_id: int) -> WorkflowSummary | None:
        rows = await fetch_as(conn, WorkflowSummary, self._sql["workflow_get"], {"id": workflow_id})
        return rows[0] if rows else None

    async def steps(
        self, conn: AsyncConnection[Any], workflow_id: int, *, limit: int = 1000
    ) -> list[WorkflowStep]:
        """The workflow's steps in the order they were declared."""
        params = {"id": workflow_id, "limit": limit}
        return await fetch_as(conn, WorkflowStep, self._sql["workflow_steps"], params)

    async def cancel(
        self,
        conn: AsyncConnection[Any],
        workflow_id: int,
        *,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> WorkflowCancel | None:
        """Cancels the workflow in one transaction: its queued and running step jobs through
        job_cancel_many (running ones revoked), then its waiting and held steps, then any step
        job a racing completion released meanwhile. None: no such workflow. A workflow whose
        steps have all finished is left as it is (outcome 'finished'). A deadlock with a
        completion (two sets of steps locked in different orders, rare) rolls the whole cancel
        back, and it is tried again."""
        actor, reason = storable_text(actor, 200), storable_text(reason, 2000)
        params = {"id": workflow_id, "actor": actor, "reason": reason, "now": now}
        for attempt in range(1, CANCEL_ATTEMPTS + 1):
            try:
                async with conn.transaction():
                    marked = await fetch(conn, self._sql["workflow_cancel_mark"], params)
                    if not marked:
                        return None
                    if marked[0]["outcome"] == "finished":
                        return WorkflowCancel(workflow_id, "finished", 0, [])
                    cancelled = await self._cancel_live(conn, workflow_id, actor, reason, now)
                    await fetch(conn, self._sql["workflow_cancel_waiting"], params)
                    cancelled += await self._cancel_live(conn, workflow_id, actor, reason, now)
                outcome, not_released = marked[0]["outcome"], marked[0]["not_released"]
                return WorkflowCancel(workflow_id, outcome, not_released, cancelled)
            except psycopg.errors.DeadlockDetected:
                if attempt == CANCEL_ATTEMPTS:
                    raise
                await asyncio.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    async def _cancel_live(
        self, conn: AsyncConnection[Any], workflow_id: int, actor: str, reason: str, now: datetime | None
    ) -> list[int]:
        live = [r["id"] for r in await fetch(conn, self._sql["workflow_live_jobs"], {"id": workflow_id})]
        if not live:
            return []
        moved = await self.control.cancel_many(
            conn, live, max_jobs=len(live), actor=actor, reason=reason, now=now
        )
        return [j.id for j in moved.moved]

    async def rebuild_purged(self, conn: AsyncConnection[Any], workflow_id: int) -> list[int]:
        """Makes again the jobs of the workflow's dead or cancelled steps that were purged since
        (released once more, with their input), the steps after them waiting again: their ids."""
        rows = await fetch(conn, self._sql["workflow_rebuild_purged"], {"id": workflow_id})
        return [r["job_id"] for r in rows]

    async def held_reasons(self, conn: AsyncConnection[Any], workflow_id: int) -> dict[str, str]:
        """The steps held for a reason of their own (an input over its bound), with the reason."""
        rows = await fetch(conn, self._sql["workflow_held_reasons"], {"id": workflow_id})
        return {r["name"]: r["held_reason"] for r in rows}

    async def failed_jobs(self, conn: AsyncConnection[Any], workflow_id: int) -> list[int]:
        """The jobs of the workflow's dead (or singly cancelled) steps: what a retry reprocesses."""
        return [r["id"] for r in await fetch(conn, self._sql["workflow_failed_jobs"], {"id": workflow_id})]

"""The check before an external call, each test in one rolled-back transaction: past the lease's
local expiry `ctx.check_in_time()` raises by itself, without waiting for the worker's watchdog to
mark the lease lost (a busy event loop runs the watchdog late, while a newer attempt may already
hold the job and have made the call)."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from psycopg import AsyncConnection

from _ordering import enqueue
from tenure import JobContext, LeaseLost
from tenure.db.queries import Queries
from tenure.handler.job_services import JobServices


async def _context(db: AsyncConnection[Any], queries: Queries) -> JobContext:
    await enqueue(db, queries, None)
    (job,) = await queries.job_claim(
        db, queue="default", owner="w1", limit=1, default_lease_seconds=30, default_runtime_seconds=300
    )
    return JobContext(job, cast(JobServices, object()))  # check() asks no service


async def test_past_its_local_expiry_a_context_refuses_an_external_call_before_the_watchdog_marks_it(
    db: AsyncConnection[Any], queries: Queries
) -> None:
    """Before its local expiry check_in_time() passes; past it, it raises LeaseLost though nothing
    has marked the lease lost yet (check() alone, which the watchdog's mark drives, still passes)."""
    ctx = await _context(db, queries)
    ctx.local_expiry = time.monotonic() + 60
    ctx.check_in_time()
    ctx.local_expiry = time.monotonic() - 0.001
    assert not ctx.lease_lost
    ctx.check()
    with pytest.raises(LeaseLost, match="expired before it was renewed"):
        ctx.check_in_time()


async def test_a_context_outside_a_worker_never_expires(db: AsyncConnection[Any], queries: Queries) -> None:
    """A context no worker set an expiry on (a test running a handler inline) checks by its flag only."""
    ctx = await _context(db, queries)
    ctx.check_in_time()
    ctx.mark_lost("gone")
    with pytest.raises(LeaseLost, match="gone"):
        ctx.check_in_time()

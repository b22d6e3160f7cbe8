"""A handler's waits: for a signal to a key, or for a time, without holding a slot or a lease.

`await ctx.wait_for(key, timeout=...)` runs one fenced statement (job_wait, waits.sql):
- a wait of this name that an earlier attempt began and that has ended: how it ended is returned
  (the signal's payload, or timed out, or ended by an operator);
- a signal to `key` already in the mailbox: it becomes the job's, and is returned at once;
- otherwise the job leaves `running` for `waiting` (its lease ended, its attempt not counted) and
  WaitStarted ends the attempt. When a signal arrives, the deadline passes or an operator ends the
  wait, the job is pending again and its handler runs again from the top: each wait it reaches
  again returns how it ended, so the handler goes on past it.

What the handler did before a wait is done again when it runs again, unless it made it safe to
repeat: put external calls in `ctx.effect` (done once, whatever the number of runs) and keep
computation cheap or deterministic before the wait. Waits are told apart by name; the default name
is the key (the sleep's place among the handler's sleeps), with `#2`, `#3` for later waits on the
same key in one run, so a handler that waits in the same order every run needs no names.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Protocol

from tenure.db.wait_queries import WaitQueries
from tenure.db.wait_rows import WaitStep
from tenure.handler.job_services import JobServices
from tenure.handler.published import FencedContext
from tenure.model.errors import LeaseLost, Permanent
from tenure.model.waits import (
    MAX_WAIT,
    STEP_CONDITION_WAIT,
    WaitResult,
    WaitStarted,
    check_signal_key,
    check_wait_name,
    seconds_of,
)

#: The pause between two tries of a wait whose job's row is locked elsewhere ('busy'); it is tried
#: again until the lease's local expiry.
BUSY_PAUSE = 0.05
#: How a wait may have ended.
ENDED = frozenset({"signalled", "timed_out", "ended"})


class WaitContext(FencedContext, Protocol):
    """What a wait needs of a running job's context (tenure.JobContext is one): a fenced write's
    needs, and the run's wait names."""

    def wait_name(self, key: str | None, name: str | None) -> str: ...
    def began_wait(self, name: str) -> None: ...

    @property
    def local_expiry(self) -> float: ...


def wait_request(
    ctx: WaitContext, key: str | None, timeout: float | timedelta | None, name: str | None
) -> tuple[str, str | None, float | None]:
    """The wait's name, key and deadline in seconds, checked before anything is written."""
    if key is not None:
        check_signal_key(key, "key to wait for")
    seconds = seconds_of(
        timeout, "a wait's timeout" if key else "a sleep", MAX_WAIT, optional=key is not None
    )
    chosen = ctx.wait_name(key, None if name is None else check_wait_name(name))
    return chosen, key, seconds


def settle(ctx: WaitContext, name: str, step: WaitStep) -> WaitResult:
    """The handler's answer for one answered wait statement: a result, or the end of the attempt."""
    if step.outcome in ("resolved", "signalled") and step.state is not None:
        return WaitResult(name, step.state, step.payload, step.signal_id, step.sent_at, step.ended_by)
    if step.outcome == "waiting":
        ctx.began_wait(name)
        raise WaitStarted(ctx.job_id, name)
    if step.outcome == "keyed":
        raise Permanent(
            f"job {ctx.job_id} has an ordering key, and a job with one cannot wait for a signal or a "
            "time yet: the next job of its key would run while it waits. Wait in a job without an "
            "ordering key, and enqueue the ordered work once the wait is over",
            code="WAIT_WITH_ORDERING_KEY",
        )
    ctx.mark_lost("fence refused the wait")
    raise LeaseLost(ctx.job_id, ctx.token, "fence refused the wait")


async def run_wait(
    ctx: WaitContext,
    services: JobServices,
    key: str | None,
    timeout: float | timedelta | None,
    name: str | None,
) -> WaitResult:
    name, key, seconds = wait_request(ctx, key, timeout, name)
    queries = WaitQueries(services.queries.schema)
    while True:
        ctx.check()
        async with services.pool.connection() as conn:
            step = await queries.job_wait(
                conn,
                job_id=ctx.job_id,
                owner=services.owner,
                token=ctx.token,
                name=name,
                key=key,
                timeout=seconds,
            )
        if step.outcome != "busy" or time.monotonic() + BUSY_PAUSE >= ctx.local_expiry:
            return settle(ctx, name, step)
        await asyncio.sleep(BUSY_PAUSE)


def run_wait_sync(
    ctx: WaitContext,
    services: JobServices,
    key: str | None,
    timeout: float | timedelta | None,
    name: str | None,
) -> WaitResult:
    """`run_wait` for plain-function handlers: its statement runs on the worker's loop, the
    handler's thread waits for the answer (as `ctx.effect_sync` does)."""
    future = asyncio.run_coroutine_threadsafe(run_wait(ctx, services, key, timeout, name), services.loop)
    return future.result()


async def read_step_condition(job_id: int, services: JobServices) -> WaitResult | None:
    """How the condition of the workflow step that job `job_id` is ended (a signal, its deadline,
    an operator), or None when the step has none (or the job is no step)."""
    queries = WaitQueries(services.queries.schema)
    async with services.pool.connection() as conn:
        records = await queries.waits_of(conn, job_id)
    for r in records:
        if r.name == STEP_CONDITION_WAIT and r.state in ENDED:
            return WaitResult(r.name, r.state, r.payload, r.signal_id, r.sent_at, r.ended_by)
    return None


def read_step_condition_sync(job_id: int, services: JobServices) -> WaitResult | None:
    """`read_step_condition` for plain-function handlers, on the worker's loop."""
    future = asyncio.run_coroutine_threadsafe(read_step_condition(job_id, services), services.loop)
    return future.result()


def default_wait_name(counts: dict[str, int], key: str | None) -> str:
    """The n-th wait on `key` in this run is named `key` (n = 1) or `key#n`; the n-th sleep,
    `sleep#n`."""
    base = key if key is not None else "sleep"
    counts[base] = counts.get(base, 0) + 1
    n = counts[base]
    if key is not None and n == 1:
        return key[:200]
    suffix = f"#{n}"
    return base[: 200 - len(suffix)] + suffix

"""The app that real worker processes run in tests/boundaries (test_x02, test_x03).

Every handler leaves marker files in `marker_dir` (`started-<token>`, `finished-<token>`), so
a test knows that the claim committed and the work began, and which attempt did what. The
first attempt (token 1) of each task hangs until the test kills, pauses or releases it (the
file `release-<token>`); later attempts run straight through. Each task comes as a plain
function (run in a worker thread) and as a coroutine (`..._async`), since the two are stopped
differently when their lease is lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import tenure

app = tenure.Tenure()

RESULTS_TABLE = "public.boundary_results"


def mark(marker_dir: str, name: str, ctx: tenure.JobContext) -> None:
    """Writes a marker atomically (write, then rename), so a reader never sees half of it."""
    path = Path(marker_dir) / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "job": ctx.job_id, "token": ctx.token, "at": time.time()}))
    tmp.rename(path)


def hold(marker_dir: str, token: int, seconds: float) -> bool:
    """Blocks until the test writes `release-<token>` (True) or `seconds` pass (False)."""
    release = Path(marker_dir) / f"release-{token}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if release.exists():
            return True
        time.sleep(0.01)
    return False


async def hold_async(marker_dir: str, token: int, seconds: float) -> bool:
    """`hold` for coroutine handlers: waits without blocking the worker's event loop."""
    release = Path(marker_dir) / f"release-{token}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if release.exists():
            return True
        await asyncio.sleep(0.01)
    return False


@app.task(name="boundary.block_first_attempt", max_attempts=5)
def block_first_attempt(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0) -> None:
    """Attempt 1 marks its start and hangs before doing any work; later attempts finish at once."""
    mark(marker_dir, f"started-{ctx.token}", ctx)
    if ctx.token == 1:
        hold(marker_dir, ctx.token, hold_seconds)
    mark(marker_dir, f"finished-{ctx.token}", ctx)


@app.task(name="boundary.record_result", max_attempts=5)
def record_result(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0) -> None:
    """Writes a result row and completes the job in ONE transaction.

    Attempt 1 stalls inside that transaction until released, so a paused worker resumes
    straight into its (late) fenced completion.
    """

    def work(tx: tenure.SyncTransaction) -> None:
        tx.execute(
            f"INSERT INTO {RESULTS_TABLE} (job_id, token, pid) VALUES (%s, %s, %s)",
            (ctx.job_id, ctx.token, os.getpid()),
        )
        mark(marker_dir, f"started-{ctx.token}", ctx)
        if ctx.token == 1:
            hold(marker_dir, ctx.token, hold_seconds)

    ctx.atomic_sync(work)
    mark(marker_dir, f"finished-{ctx.token}", ctx)


@app.task(name="boundary.block_first_attempt_async", max_attempts=5)
async def block_first_attempt_async(
    ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0
) -> None:
    """`block_first_attempt` as a coroutine."""
    mark(marker_dir, f"started-{ctx.token}", ctx)
    if ctx.token == 1:
        await hold_async(marker_dir, ctx.token, hold_seconds)
    mark(marker_dir, f"finished-{ctx.token}", ctx)


async def _record_result_async(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float) -> None:
    async def work(tx: tenure.AsyncTransaction) -> None:
        await tx.execute(
            f"INSERT INTO {RESULTS_TABLE} (job_id, token, pid) VALUES (%s, %s, %s)",
            (ctx.job_id, ctx.token, os.getpid()),
        )
        mark(marker_dir, f"started-{ctx.token}", ctx)
        if ctx.token == 1:
            await hold_async(marker_dir, ctx.token, hold_seconds)

    await ctx.atomic(work)
    mark(marker_dir, f"finished-{ctx.token}", ctx)


@app.task(name="boundary.record_result_async", max_attempts=5)
async def record_result_async(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0) -> None:
    """`record_result` as a coroutine: once its lease is lost, the worker's watchdog cancels it."""
    await _record_result_async(ctx, marker_dir, hold_seconds)


@app.task(name="boundary.record_result_shielded", max_attempts=5)
async def record_result_shielded(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0) -> None:
    """`record_result_async` shielded from cancellation, so that its late completion reaches the
    database whatever the watchdog does, and only the fence can refuse it."""
    completion = asyncio.ensure_future(_record_result_async(ctx, marker_dir, hold_seconds))
    # Once the handler is cancelled nobody awaits the completion; its LeaseLost is expected.
    completion.add_done_callback(lambda done: done.cancelled() or done.exception())
    await asyncio.shield(completion)


@app.task(name="boundary.workflow_parent", max_attempts=5)
def workflow_parent(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0) -> int:
    """A workflow step whose first attempt hangs until released; its result is its token, so the
    step after it shows which attempt released it."""
    mark(marker_dir, f"started-{ctx.token}", ctx)
    if ctx.token == 1:
        hold(marker_dir, ctx.token, hold_seconds)
    mark(marker_dir, f"finished-{ctx.token}", ctx)
    return ctx.token


@app.task(name="boundary.workflow_child", max_attempts=5)
def workflow_child(ctx: tenure.JobContext, marker_dir: str, parent: int) -> None:
    """The step after workflow_parent: one marker per run, naming the parent's token it got."""
    mark(marker_dir, f"child-{ctx.job_id}-{ctx.token}-of-{parent}", ctx)


@app.task(name="boundary.wait_for_signal", max_attempts=5)
async def wait_for_signal(
    ctx: tenure.JobContext, marker_dir: str, key: str, hold_seconds: float = 0.0
) -> dict[str, object]:
    """Waits for a signal to `key`; its first claim (token 1) first hangs for `hold_seconds`, so a
    test can kill its worker before the wait begins. Marks each run's start and its end."""
    mark(marker_dir, f"started-{ctx.token}", ctx)
    if ctx.token == 1 and hold_seconds > 0:
        await hold_async(marker_dir, ctx.token, hold_seconds)
    got = await ctx.wait_for(key, timeout=3600)
    mark(marker_dir, f"finished-{ctx.token}", ctx)
    return {"outcome": got.outcome, "payload": got.payload}

"""The app real worker processes run in the job-control boundary tests (x11): handlers that
ignore a revoke, and a quick one for pauses. Markers in `marker_dir` tell the test what each
attempt did (see boundary_app.mark)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import tenure
from apps.boundary_app import RESULTS_TABLE, mark

app = tenure.Tenure()


def _write_everything(ctx: tenure.JobContext, marker_dir: str) -> None:
    """After ignoring its revoke: an effect through the ledger, then a result row in ctx.atomic.
    Each refusal leaves a marker; nothing of either may reach the database."""
    try:
        ctx.effect_sync("charge", perform=lambda key: {"charged": key})
        mark(marker_dir, f"effect-written-{ctx.token}", ctx)
    except tenure.LeaseLost:
        mark(marker_dir, f"effect-refused-{ctx.token}", ctx)

    def work(tx: tenure.SyncTransaction) -> None:
        tx.execute(
            f"INSERT INTO {RESULTS_TABLE} (job_id, token, pid) VALUES (%s, %s, 0)", (ctx.job_id, ctx.token)
        )

    try:
        ctx.atomic_sync(work)
        mark(marker_dir, f"atomic-committed-{ctx.token}", ctx)
    except tenure.LeaseLost:
        mark(marker_dir, f"atomic-refused-{ctx.token}", ctx)


@app.task(name="control.never_checks", max_attempts=3)
def never_checks(ctx: tenure.JobContext, marker_dir: str, seconds: float) -> None:
    """A thread that sleeps through its revoke without one ctx.check(), then tries to write."""
    mark(marker_dir, f"started-{ctx.token}", ctx)
    time.sleep(seconds)
    mark(marker_dir, f"woke-{ctx.token}", ctx)
    _write_everything(ctx, marker_dir)


@app.task(name="control.ignores_cancel", max_attempts=3)
async def ignores_cancel(ctx: tenure.JobContext, marker_dir: str, seconds: float) -> None:
    """A coroutine that swallows every cancellation for `seconds`, then tries to write."""
    mark(marker_dir, f"started-{ctx.token}", ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if not (Path(marker_dir) / f"cancelled-{ctx.token}").exists():
                mark(marker_dir, f"cancelled-{ctx.token}", ctx)
    await asyncio.to_thread(_write_everything, ctx, marker_dir)


@app.task(name="control.quick", queue="paused")
def quick(ctx: tenure.JobContext, marker_dir: str) -> None:
    mark(marker_dir, f"ran-{ctx.job_id}", ctx)


#: The x13 limits: three running across every worker, and a rated queue.
LIMITED_QUEUE, RATED_QUEUE = "limited", "rated"
app.limit(LIMITED_QUEUE, max_running=3)
app.limit(RATED_QUEUE, rate=20, per=1.0)


@app.task(name="control.hold", queue=LIMITED_QUEUE, max_attempts=5)
def hold(ctx: tenure.JobContext, marker_dir: str, seconds: float) -> None:
    """Holds its slot for `seconds`, marking when it started."""
    mark(marker_dir, f"held-{ctx.job_id}-{ctx.token}", ctx)
    time.sleep(seconds)


@app.task(name="control.tick", queue=RATED_QUEUE)
async def tick(ctx: tenure.JobContext) -> None:
    pass

"""What `tenure worker` says when it starts and when it stops: enough for a newcomer to see it
runs, what it serves and where, and what it did."""

from __future__ import annotations

import asyncio
import contextlib
import time

from rich.console import Console
from rich.markup import escape

from tenure.db.connect import describe_dsn
from tenure.ops.views.durations import human
from tenure.worker.stats import WorkerStats
from tenure.worker.worker import Worker


def start_banner(console: Console, worker: Worker, app_name: str, dsn: str) -> None:
    options = worker.options
    tasks = sorted(task.name for task in worker.registry)
    wakes = (
        "woken by NOTIFY" + (" on the listen DSN" if options.listen_dsn else "")
        if options.listen
        else "polling only"
    )
    console.print(
        f"[bold]tenure worker[/bold] {escape(options.worker_id)} started\n"
        f"  app          {escape(app_name)}: {len(tasks)} task(s): {escape(', '.join(tasks) or '-')}\n"
        f"  queues       {escape(', '.join(worker.queues))}\n"
        f"  database     {escape(describe_dsn(dsn))}, schema {escape(worker.schema)}\n"
        f"  concurrency  {options.concurrency}, lease {options.lease_seconds:g}s, {wakes}, "
        f"polling every {options.poll_interval:g}s\n"
        "  Ctrl-C stops it: running jobs get the grace period, then are given back",
        highlight=False,
    )


async def run_announced(console: Console, worker: Worker, app_name: str, dsn: str) -> WorkerStats:
    """Runs `worker` (stopping on SIGTERM or SIGINT) and prints its start banner once it has
    connected, checked the schema and declared its tasks: a worker that cannot start says only
    why, never "started" first."""

    async def announce() -> None:
        await worker.started.wait()
        start_banner(console, worker, app_name, dsn)

    announcer = asyncio.create_task(announce())
    try:
        return await worker.run(handle_signals=True)
    finally:
        announcer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await announcer


def stop_summary(console: Console, worker: Worker, stats: WorkerStats, started: float) -> None:
    failures = ", ".join(f"{code} {n}" for code, n in stats.failures_by_code.most_common(5))
    console.print(
        f"[bold]tenure worker[/bold] {escape(worker.options.worker_id)} stopped after "
        f"{human(time.monotonic() - started)}: claimed {stats.claimed}, succeeded {stats.succeeded}, "
        f"retried {stats.retried}, dead {stats.dead}, fenced {stats.fencing_losses}, "
        f"given back at shutdown {stats.released}" + (f" (failures: {escape(failures)})" if failures else ""),
        highlight=False,
    )

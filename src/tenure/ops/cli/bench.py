"""`tenure bench`: the performance benchmark (docs/performance.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from tenure.lab.bench.sizes import SECTIONS, SIZES
from tenure.ops.cli._common import EXIT_USAGE, emit_json, err, positive_int, resolve
from tenure.worker.event_loop import EVENT_LOOP_ENV, EVENT_LOOPS, chosen_event_loop
from tenure.worker.options import WorkerOptions


async def cmd_bench(args: argparse.Namespace) -> int:
    # Imported here: the benchmark and everything it drives would otherwise load with every
    # `tenure` command (a tenth of a second of each one's start).
    from tenure.lab.bench.runner import BenchOptions, run

    chosen = tuple(args.sections.split(",")) if args.sections else SECTIONS
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        err.print(f"error: unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
        return EXIT_USAGE
    resolved = resolve(args)
    options = BenchOptions(
        server_dsn=resolved.dsn,
        size=args.size,
        processes=args.processes,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        sections=chosen,
        with_peers=not args.no_peers,
        out_dir=Path(args.out),
        embedded=resolved.embedded,
        show_table=not args.json,
        event_loop=chosen_event_loop(args.event_loop),
    )

    started = time.monotonic()

    def progress(message: str) -> None:
        if not args.json:
            err.print(f"[dim]bench {time.monotonic() - started:6.1f}s: {escape(message)}[/dim]")

    result = await run(options, log=progress)
    if args.json:
        emit_json(result)
    else:
        err.print(f"wrote {options.out_dir / 'bench.json'}; chart: {result['chart']}", markup=False)
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench",
        parents=[common],
        help="measure throughput, latency, backlog, recovery and cost against baselines",
        description="Runs every section against one server with its durable settings and prints each "
        "figure as a ratio against a baseline measured in the same run, then each target with its "
        "ratio and whether it is met. Creates and drops scratch databases tenure_bench_<pid>_*; "
        "needs a role with CREATEDB.",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--size", choices=sorted(SIZES), default="standard", help="how big (default: standard)")
    size.add_argument(
        "--smoke", dest="size", action="store_const", const="smoke", help="same as --size smoke"
    )
    size.add_argument("--full", dest="size", action="store_const", const="full", help="same as --size full")
    p.add_argument("--sections", default=None, help=f"comma-separated subset of: {', '.join(SECTIONS)}")
    p.add_argument("--processes", type=positive_int, default=2, help="worker processes (default: 2)")
    p.add_argument("--concurrency", type=positive_int, default=100, help="job slots per process")
    p.add_argument(
        "--claim-batch",
        type=positive_int,
        default=WorkerOptions().claim_batch,
        help="most jobs per claim of Tenure's workers (default: a worker's own default, %(default)s; "
        "the raw-SQL ceiling sweeps its own claim sizes)",
    )
    p.add_argument(
        "--no-peers",
        action="store_true",
        help="skip PgQueuer and Procrastinate (their drains and latency, and PgQueuer's end-to-end run)",
    )
    p.add_argument("--out", default="bench-results", help="results directory (default: bench-results)")
    p.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=None,
        help="the event loop of every process the benchmark starts, Tenure's and its baselines' alike "
        f"(default: ${EVENT_LOOP_ENV}, else asyncio)",
    )
    p.set_defaults(handler=cmd_bench)

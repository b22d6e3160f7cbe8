"""Health at a glance: `tenure status` for people, `tenure check` for cron and health checks."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table

from tenure.db.ops_queries import OpsQueries
from tenure.ops.cli._common import connected, emit_json, out
from tenure.ops.views.durations import duration, human
from tenure.ops.views.health import THROUGHPUT_MINUTES, Report, problems, queue_summaries, without_worker

EXIT_THRESHOLD = 1


async def read_report(args: argparse.Namespace, *, with_history: bool) -> Report:
    """The gauges, recent throughput and workers, all from one read-only snapshot."""
    ops = OpsQueries(args.schema)
    async with connected(args) as conn, ops.snapshot(conn):
        snapshot = await ops.read_gauges(
            conn, near_expiry_seconds=args.near_expiry, stale_seconds=args.stale_after
        )
        finished = await ops.finished_recent(conn, minutes=THROUGHPUT_MINUTES) if with_history else []
        workers = await ops.worker_list(conn) if with_history else []
    return Report(snapshot, finished, workers)


#: Terminals narrower than this get the compact table (short headings, a sparkline of throughput).
COMPACT_BELOW = 110
_SPARKS = " ▁▂▃▄▅▆▇█"


def sparkline(counts: list[int]) -> str:
    """Oldest minute first, each as a bar scaled to the busiest."""
    peak = max(counts, default=0)
    if peak == 0:
        return "·" * len(counts)
    return "".join(_SPARKS[max(1, round(8 * n / peak))] if n else "·" for n in counts)


def _queue_table(queues: list[dict[str, Any]], schema: str, *, compact: bool) -> Table:
    if compact:
        columns = (
            "queue",
            "sched",
            "pend",
            "run",
            "wait",
            "dead",
            "oldest",
            "dead for",
            "expiring",
            "done/min",
        )
    else:
        columns = (
            "queue",
            "scheduled",
            "pending",
            "running",
            "waiting",
            "dead",
            "oldest claimable",
            "oldest dead",
            "near expiry",
            f"done/min (last {THROUGHPUT_MINUTES})",
        )
    table = Table(title=f"Tenure queues (schema {schema})", pad_edge=not compact, collapse_padding=compact)
    longest = max(len(q["queue"]) for q in queues)
    table.add_column(columns[0], no_wrap=True, min_width=longest)  # never cut a queue's name
    for column in columns[1:]:
        table.add_column(column, justify="right", no_wrap=compact)
    for q in queues:
        done = q.get("finished_per_minute", {}).get("succeeded", [0] * THROUGHPUT_MINUTES)
        oldest_first = list(reversed(done))
        table.add_row(
            q["queue"],
            str(q["scheduled"]),
            str(q["pending"]),
            str(q["running"]),
            str(q["waiting"]),
            str(q["dead"]),
            human(q["oldest_claimable_age_s"]),
            human(q["oldest_dead_age_s"]),
            str(q["leases_near_expiry"]),
            f"{oldest_first[-1]} {sparkline(oldest_first)}" if compact else " ".join(map(str, oldest_first)),
        )
    if compact:
        table.caption = (
            f"wait: jobs waiting for a signal or a time; oldest: the oldest claimable job's wait; "
            f"done/min: last minute, then {THROUGHPUT_MINUTES} ▸"
        )
    return table


async def cmd_status(args: argparse.Namespace) -> int:
    report = await read_report(args, with_history=True)
    summary = queue_summaries(report, args.stale_after)
    if args.json:
        emit_json(summary)
        return 0
    if not summary["queues"]:
        out.print("no scheduled, pending, running or dead jobs, and none finished in the last minutes")
    else:
        out.print(_queue_table(summary["queues"], args.schema, compact=out.width < COMPACT_BELOW))
    for lim in report.snapshot.limits:
        parts = [f"{lim['running']} running"]
        if lim["max_running"] is not None:
            parts[0] += f" of at most {lim['max_running']}"
        if lim["key_field"]:
            parts.append(f"at most {lim['max_running_per_key']} per {lim['key_field']}")
        if lim["rate"]:
            parts.append(f"{lim['rate']} starts per {lim['per_seconds']:g}s")
        out.print(f"queue {escape(lim['queue'])} is limited: {', '.join(parts)}", highlight=False)
    for p in summary["paused"]:
        ends = f"until {p['until']:%Y-%m-%d %H:%M:%S %Z}" if p["until"] else "until resumed"
        out.print(
            f"[bold yellow]queue {escape(p['queue'])} paused[/] for {human(p['paused_s'])}, {ends} "
            "(no worker claims from it; `tenure queues list` says by whom and why)",
            highlight=False,
        )
    w = summary["workers"]
    out.print(
        f"workers: {w['registered']} registered ({w['stale']} silent for over {human(args.stale_after)}), "
        f"{w['busy_slots']}/{w['capacity_slots']} slots busy, {w['lease_owners']} holding leases; "
        f"lock waits now: {summary['lock_waits']}"
    )
    for line in without_worker(report.snapshot):
        out.print(f"[bold red]{escape(line)}[/]", highlight=False)
    replication = report.snapshot.replication
    if replication is not None and replication.unprotected:
        out.print(f"[bold red]replication: {escape(replication.describe())}[/]", highlight=False)
    elif replication is not None:
        out.print(f"replication: {escape(replication.describe())}", highlight=False)
    for worker in report.workers:
        for service, health in sorted((worker.failing or {}).items()):
            out.print(
                f"[bold red]worker {escape(worker.id)}: {escape(service)} failing for "
                f"{human(health.get('failing_seconds'))}[/] ({health.get('failures')} in a row): "
                f"{escape(str(health.get('error')))}",
                highlight=False,
            )
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    report = await read_report(args, with_history=False)
    found = problems(report, args)
    if args.json:
        emit_json({"ok": not found, "problems": found, **queue_summaries(report, args.stale_after)})
    elif found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        print(f"CRITICAL: {found[0]}{more}")
    else:
        print("OK")
    return EXIT_THRESHOLD if found else 0


def _snapshot_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--near-expiry", type=duration, default=10.0, help="a lease this close to expiry counts")
    p.add_argument("--stale-after", type=duration, default=60.0, help="a worker silent this long is stale")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common], help="queues at a glance")
    _snapshot_options(p)
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser(
        "check",
        parents=[common],
        help="exit 1 with a one-line reason when a threshold is crossed (for cron and health checks)",
    )
    _snapshot_options(p)
    p.add_argument("--queue", default=None, help="check this queue only")
    p.add_argument(
        "--max-claimable-age", type=duration, default=300.0, help="oldest claimable job's wait (default 5m)"
    )
    p.add_argument(
        "--max-paused-age",
        type=duration,
        default=None,
        help="longest a queue may stay paused (default: no limit); a paused queue's waiting jobs "
        "never count against --max-claimable-age",
    )
    p.add_argument("--max-dead", type=int, default=None, help="most dead jobs allowed (default: no limit)")
    p.add_argument("--max-dead-age", type=duration, default=None, help="oldest unresolved dead job's age")
    p.add_argument(
        "--max-stale-workers", type=int, default=None, help="most workers allowed silent past --stale-after"
    )
    p.add_argument(
        "--max-failing-workers",
        type=int,
        default=0,
        help="most workers allowed to report a failing service (default 0)",
    )
    p.add_argument(
        "--max-jobs-without-worker",
        type=int,
        default=None,
        help="most waiting jobs allowed whose task no live worker registers with their queue "
        "(default: no limit; 0 flags any, as the dashboard does)",
    )
    p.add_argument(
        "--allow-unprotected-commits",
        action="store_true",
        help="do not flag a primary that acknowledges commits without a synchronous standby while "
        "it has standbys, or whose commits wait for one that is absent (flagged by default; a "
        "single server without replication never is)",
    )
    p.set_defaults(handler=cmd_check)

"""Health at a glance: `tenure status` for people, `tenure check` for cron and health checks."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rich.markup import escape
from rich.table import Table

from tenure.cli._common import emit_json, out, resolve
from tenure.cli._duration import duration, human
from tenure.db.connect import connect
from tenure.db.migrate import require_current_schema
from tenure.db.ops_queries import OpsQueries, Snapshot

EXIT_THRESHOLD = 1
THROUGHPUT_MINUTES = 5


@dataclass(frozen=True)
class Report:
    snapshot: Snapshot
    finished: list[dict[str, Any]]
    workers: list[dict[str, Any]]


async def read_report(args: argparse.Namespace, *, with_history: bool) -> Report:
    """The gauges, recent throughput and workers, all from one read-only snapshot."""
    ops = OpsQueries(args.schema)
    async with await connect(resolve(args).dsn, name="tenure-cli") as conn:
        await require_current_schema(conn, args.schema)
        async with conn.transaction():
            await ops.begin_snapshot(conn)
            snapshot = await ops.read_gauges(
                conn, near_expiry_seconds=args.near_expiry, stale_seconds=args.stale_after
            )
            finished = await ops.finished_recent(conn, minutes=THROUGHPUT_MINUTES) if with_history else []
            workers = await ops.worker_list(conn) if with_history else []
    return Report(snapshot, finished, workers)


def queue_summaries(report: Report, stale_after: float) -> dict[str, Any]:
    queues: dict[str, dict[str, Any]] = {}
    for g in report.snapshot.queues:
        queues[g.queue] = {
            "queue": g.queue,
            "scheduled": g.scheduled,
            "pending": g.pending,
            "running": g.running,
            "dead": g.dead,
            "oldest_claimable_age_s": round(g.oldest_claimable_age, 3) if g.oldest_claimable_at else None,
            "oldest_dead_age_s": round(g.oldest_dead_age, 3) if g.oldest_dead_at else None,
            "leases_near_expiry": g.leases_near_expiry,
        }
    for r in report.finished:
        q = queues.setdefault(
            r["queue"],
            {
                "queue": r["queue"],
                "scheduled": 0,
                "pending": 0,
                "running": 0,
                "dead": 0,
                "oldest_claimable_age_s": None,
                "oldest_dead_age_s": None,
                "leases_near_expiry": 0,
            },
        )
        per_minute = q.setdefault("finished_per_minute", {}).setdefault(r["state"], [0] * THROUGHPUT_MINUTES)
        if 0 <= r["minutes_ago"] < THROUGHPUT_MINUTES:
            per_minute[r["minutes_ago"]] += r["jobs"]
    paused = {p["queue"]: p for p in report.snapshot.paused}
    for q in queues.values():
        q["paused"] = q["queue"] in paused
    w = report.snapshot.workers
    return {
        "db_now": w.db_now,
        "queues": sorted(queues.values(), key=lambda q: q["queue"]),
        "limits": report.snapshot.limits,
        "paused": [
            {"queue": p["queue"], "paused_s": round(p["paused_seconds"], 3), "until": p["until"]}
            for p in report.snapshot.paused
        ],
        "workers": {
            "registered": w.registered,
            "stale": w.stale,
            "stale_after_s": stale_after,
            "lease_owners": w.lease_owners,
            "failing": w.failing,
            "busy_slots": w.busy,
            "capacity_slots": w.capacity,
            "list": report.workers,
        },
        "lock_waits": report.snapshot.lock_waits,
    }


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
        columns = ("queue", "sched", "pend", "run", "dead", "waits", "dead for", "expiring", "done/min")
    else:
        columns = (
            "queue",
            "scheduled",
            "pending",
            "running",
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
            str(q["dead"]),
            human(q["oldest_claimable_age_s"]),
            human(q["oldest_dead_age_s"]),
            str(q["leases_near_expiry"]),
            f"{oldest_first[-1]} {sparkline(oldest_first)}" if compact else " ".join(map(str, oldest_first)),
        )
    if compact:
        table.caption = f"waits: the oldest claimable's; done/min: last minute, then {THROUGHPUT_MINUTES} ▸"
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
    for worker in w["list"]:
        for service, health in sorted((worker.get("failing") or {}).items()):
            out.print(
                f"[bold red]worker {escape(worker['id'])}: {escape(service)} failing for "
                f"{human(health.get('failing_seconds'))}[/] ({health.get('failures')} in a row): "
                f"{escape(str(health.get('error')))}",
                highlight=False,
            )
    return 0


def problems(report: Report, args: argparse.Namespace) -> list[str]:
    """Every threshold crossed, worst first within each kind, as one-line reasons."""
    found: list[str] = []
    queues = [q for q in report.snapshot.queues if args.queue is None or q.queue == args.queue]
    paused = {p["queue"]: p for p in report.snapshot.paused if args.queue is None or p["queue"] == args.queue}
    for p in sorted(paused.values(), key=lambda p: -p["paused_seconds"]):
        if args.max_paused_age is not None and p["paused_seconds"] > args.max_paused_age:
            found.append(
                f"queue {p['queue']}: paused for {human(p['paused_seconds'])} (limit "
                f"{human(args.max_paused_age)}); resume it with `tenure queues resume {p['queue']}`"
            )
    for q in sorted(queues, key=lambda q: -q.oldest_claimable_age):
        if q.queue in paused:
            continue  # it waits on purpose; --max-paused-age watches the pause itself
        if args.max_claimable_age is not None and q.oldest_claimable_age > args.max_claimable_age:
            found.append(
                f"queue {q.queue}: oldest claimable job has waited {human(q.oldest_claimable_age)} "
                f"(limit {human(args.max_claimable_age)})"
            )
    for q in sorted(queues, key=lambda q: -q.oldest_dead_age):
        if args.max_dead_age is not None and q.dead and q.oldest_dead_age > args.max_dead_age:
            found.append(
                f"queue {q.queue}: a dead job has been unresolved for {human(q.oldest_dead_age)} "
                f"(limit {human(args.max_dead_age)})"
            )
    dead = sum(q.dead for q in queues)
    if args.max_dead is not None and dead > args.max_dead:
        found.append(f"{dead} dead jobs (limit {args.max_dead})")
    stale = report.snapshot.workers.stale
    if args.max_stale_workers is not None and stale > args.max_stale_workers:
        found.append(
            f"{stale} workers silent for over {human(args.stale_after)} (limit {args.max_stale_workers})"
        )
    failing = report.snapshot.workers.failing
    if args.max_failing_workers is not None and failing > args.max_failing_workers:
        found.append(
            f"{failing} workers report a failing service (limit {args.max_failing_workers}); "
            "`tenure status` names the service and its error"
        )
    return found


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
    p.set_defaults(handler=cmd_check)

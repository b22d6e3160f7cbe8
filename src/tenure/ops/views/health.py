"""The queues' health as `tenure status`, `tenure check` and the dashboard's overview read it:
one snapshot, its per-queue summary, and every threshold it crosses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tenure.db.gauges import STRANDED_COUNT_LIMIT, Snapshot
from tenure.db.ops_rows import FinishedCount, RegisteredWorker
from tenure.ops.views.durations import human

#: Minutes of throughput history the summaries keep.
THROUGHPUT_MINUTES = 5


class Thresholds(Protocol):
    """What `problems` judges against (the options of `tenure check`; None: not checked)."""

    queue: str | None
    max_paused_age: float | None
    max_claimable_age: float | None
    max_dead_age: float | None
    max_dead: int | None
    max_stale_workers: int | None
    max_failing_workers: int | None
    stale_after: float
    allow_unprotected_commits: bool
    max_jobs_without_worker: int | None


@dataclass(frozen=True, slots=True)
class Report:
    snapshot: Snapshot
    finished: list[FinishedCount]
    workers: list[RegisteredWorker]


def queue_summaries(report: Report, stale_after: float) -> dict[str, Any]:
    queues: dict[str, dict[str, Any]] = {}
    for g in report.snapshot.queues:
        queues[g.queue] = {
            "queue": g.queue,
            "scheduled": g.scheduled,
            "pending": g.pending,
            "running": g.running,
            "waiting": g.waiting,
            "dead": g.dead,
            "oldest_claimable_age_s": round(g.oldest_claimable_age, 3) if g.oldest_claimable_at else None,
            "oldest_dead_age_s": round(g.oldest_dead_age, 3) if g.oldest_dead_at else None,
            "leases_near_expiry": g.leases_near_expiry,
        }
    for r in report.finished:
        q = queues.setdefault(
            r.queue,
            {
                "queue": r.queue,
                "scheduled": 0,
                "pending": 0,
                "running": 0,
                "waiting": 0,
                "dead": 0,
                "oldest_claimable_age_s": None,
                "oldest_dead_age_s": None,
                "leases_near_expiry": 0,
            },
        )
        per_minute = q.setdefault("finished_per_minute", {}).setdefault(r.state, [0] * THROUGHPUT_MINUTES)
        if 0 <= r.minutes_ago < THROUGHPUT_MINUTES:
            per_minute[r.minutes_ago] += r.jobs
    paused = {p["queue"]: p for p in report.snapshot.paused}
    for q in queues.values():
        q["paused"] = q["queue"] in paused
    w = report.snapshot.workers
    replication = report.snapshot.replication
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
        "replication": None if replication is None else replication.as_dict(),
        "jobs_without_worker": [
            {k: row[k] for k in ("task", "queue", "jobs", "registered")}
            for row in report.snapshot.without_worker
        ],
        "jobs_without_worker_pairs": max(
            (int(row["stranded_pairs"]) for row in report.snapshot.without_worker), default=0
        ),
    }


def without_worker(snapshot: Snapshot, queue: str | None = None) -> list[str]:
    """One line per task and queue whose waiting jobs no live worker can run, with the fix."""
    rows = [r for r in snapshot.without_worker if queue is None or r["queue"] == queue]
    lines = [_stranded(r["task"], r["queue"], int(r["jobs"]), bool(r["registered"])) for r in rows]
    listed = len(snapshot.without_worker)
    more = max((int(r["stranded_pairs"]) for r in snapshot.without_worker), default=0) - listed
    if queue is None and more > 0:
        lines.append(
            f"and {more} more tasks and queues whose jobs no live worker runs (the first "
            f"{listed} by name are listed)"
        )
    return lines


def _stranded(task: str, queue: str, jobs: int, registered: bool) -> str:
    count = f"at least {jobs:,} jobs" if jobs >= STRANDED_COUNT_LIMIT else f"{jobs:,} jobs"
    waits = f"1 job of task {task} waits" if jobs == 1 else f"{count} of task {task} wait"
    if registered:
        return (
            f"{waits} in queue {queue}, and no live worker that registers {task} serves {queue}: "
            f"start one whose --queues include {queue}"
        )
    if task.startswith("__main__."):
        return (
            f"{waits} in queue {queue}, and no live worker registers {task}: it was registered in a "
            "script run directly, which names its tasks __main__.NAME; define it in a module that "
            "both the script and `tenure worker MODULE` import, or give it a fixed name "
            "(@app.task(name=...))"
        )
    return (
        f"{waits} in queue {queue}, and no live worker registers {task}: start a worker that "
        "imports the module defining it (a task registered in a script run directly is named "
        f"__main__.{task.rpartition('.')[2]})"
    )


def problems(report: Report, args: Thresholds) -> list[str]:
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
    replication = report.snapshot.replication
    if replication is not None and replication.unprotected and not args.allow_unprotected_commits:
        found.append(f"replication: {replication.describe()}")
    stranded = sum(int(r["jobs"]) for r in report.snapshot.without_worker if args.queue in (None, r["queue"]))
    if args.max_jobs_without_worker is not None and stranded > args.max_jobs_without_worker:
        found.extend(without_worker(report.snapshot, args.queue))
    return found

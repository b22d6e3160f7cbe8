"""Job control from the command line: cancel and revoke, retry now, queue pauses and
job results.

Exit codes: 0 done; 1 the database's state refused the verb and nothing was changed (a
finished job, a queue that is not paused, a filter matching nothing) or, for `result`, the job
has no result (unfinished, timed out, dead or cancelled); 2 the command itself is wrong (bad
JSON, a bad time, a missing reason, or a filter over the bound without --yes).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from rich.markup import escape
from rich.table import Table

from tenure.db.control_queries import ControlQueries
from tenure.db.ops_queries import OpsQueries
from tenure.db.queries import Queries
from tenure.model.errors import ValidationError
from tenure.model.jobs import JobState
from tenure.model.validation import MAX_ATTEMPTS_LIMIT
from tenure.ops.cli._common import (
    EXIT_USAGE,
    client_for,
    connected,
    emit_json,
    err,
    out,
    positive_int,
)
from tenure.ops.views.durations import duration, human
from tenure.producer.control import DEFAULT_MAX_JOBS, CancelReport, ControlRefused, TooManyMatched
from tenure.producer.results import JobFailed, ResultTimeout, settled

EXIT_REFUSED = 1
#: How often `result --wait` reads a job that sends no notification when it finishes (one
#: enqueued without result_wanted).
RESULT_POLL_SECONDS = 0.5
SHOWN_IDS = 20


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:SHOWN_IDS])
    return shown + (f" ... ({len(ids)} in all)" if len(ids) > SHOWN_IDS else "")


def _refused(exc: ControlRefused) -> int:
    err.print(f"error: {exc}", markup=False)
    return EXIT_REFUSED


# -- cancel ------------------------------------------------------------------------------------


def _contains(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"--contains is not valid JSON ({exc}); give an object like '{{\"customer\": 42}}'"
        ) from None
    if not isinstance(value, dict):
        raise ValidationError(
            f"--contains must be a JSON object (jobs whose payload contains it match), got "
            f"{type(value).__name__} {text!r}; write it like '{{\"customer\": 42}}'"
        )
    return value


def _check_cancel_target(args: argparse.Namespace) -> None:
    """The library checks these too; here they are said in the command's own flags."""
    has_filter = any(v is not None for v in (args.queue, args.task, args.contains, args.older_than))
    if args.ids and has_filter:
        raise ValidationError(
            "give job ids or a filter (--queue, --task, --contains, --older-than), not both"
        )
    if not args.ids and not has_filter:
        raise ValidationError(
            "name the jobs to cancel: job ids, or a filter (--queue, --task, --contains, --older-than)"
        )
    if args.requeue and not args.ids and not args.running:
        raise ValidationError("--requeue gives back running jobs: with a filter, add --running too")


async def cmd_cancel(args: argparse.Namespace) -> int:
    _check_cancel_target(args)
    contains = _contains(args.contains)
    max_jobs = None if args.yes else DEFAULT_MAX_JOBS
    async with client_for(args) as client:
        try:
            report = await client.cancel(
                args.ids or None,
                reason=args.reason,
                queue=args.queue,
                task=args.task,
                contains=contains,
                older_than=args.older_than,
                running=args.running,
                requeue=args.requeue,
                max_jobs=max_jobs,
                actor=args.actor,
            )
        except TooManyMatched:
            err.print(
                f"error: more than {DEFAULT_MAX_JOBS} jobs match the filter; nothing was cancelled. "
                "Narrow the filter, or add --yes to cancel every job that matches",
                markup=False,
            )
            return EXIT_USAGE
        except ControlRefused as exc:
            return _refused(exc)
    if args.json:
        emit_json({"cancelled": report.cancelled, "revoked": report.revoked, "requeued": report.requeue})
    else:
        _print_cancel(report)
    return 0


def _print_cancel(report: CancelReport) -> None:
    if report.cancelled:
        out.print(f"cancelled {len(report.cancelled)} waiting or dead job(s): {_ids(report.cancelled)}")
    if report.revoked and report.requeue:
        out.print(
            f"requeued {len(report.revoked)} running job(s), pending again under a new token (the "
            f"revoked attempt is not counted; the old holder's writes are refused): {_ids(report.revoked)}"
        )
    elif report.revoked:
        out.print(
            f"revoked {len(report.revoked)} running job(s), now cancelled: their holders are told, and "
            f"every later write of theirs is refused: {_ids(report.revoked)}"
        )


# -- retry -------------------------------------------------------------------------------------


async def cmd_retry(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        try:
            moved = await client.retry(args.ids, reason=args.reason, attempts=args.attempts, actor=args.actor)
        except ControlRefused as exc:
            return _refused(exc)
    if args.json:
        emit_json({"retried": moved})
    else:
        out.print(
            f"{len(moved)} job(s) pending now (dead or cancelled ones with {args.attempts} more "
            f"attempt(s)): {_ids(moved)}"
        )
    return 0


# -- queues ------------------------------------------------------------------------------------


def _ago(at: datetime | None, now: datetime) -> str:
    return "-" if at is None else f"{human(max(0.0, (now - at).total_seconds()))} ago"


def _from_now(at: datetime | None, now: datetime) -> str:
    return "until resumed" if at is None else f"in {human(max(0.0, (at - now).total_seconds()))}"


async def _queue_rows(args: argparse.Namespace) -> tuple[list[dict[str, Any]], datetime]:
    """Every queue that has jobs, a pause or a registered worker, read from one snapshot."""
    ops = OpsQueries(args.schema)
    control = ControlQueries(args.schema)
    async with connected(args) as conn, ops.snapshot(conn):
        counts = await Queries(args.schema).queue_stats(conn)
        pauses = await control.pauses(conn)
        workers = await ops.worker_list(conn)
        now = await control.db_now(conn)
    queues: dict[str, dict[str, Any]] = {}

    def row(name: str) -> dict[str, Any]:
        return queues.setdefault(
            name,
            {
                "queue": name,
                **{state.value: 0 for state in JobState},
                "paused": False,
                "paused_at": None,
                "paused_by": None,
                "paused_until": None,
                "pause_reason": None,
                "workers": 0,
            },
        )

    for c in counts:
        row(c.queue)[c.state.value] = c.jobs
    for p in pauses:
        row(p.queue).update(
            paused=True, paused_at=p.paused_at, paused_by=p.actor, paused_until=p.until, pause_reason=p.reason
        )
    for w in workers:
        live = w.silent_seconds <= args.stale_after
        for name in w.queues:
            row(name)["workers"] += 1 if live else 0
    return sorted(queues.values(), key=lambda q: q["queue"]), now


async def cmd_queues_list(args: argparse.Namespace) -> int:
    queues, now = await _queue_rows(args)
    if args.json:
        emit_json(queues)
        return 0
    if not queues:
        out.print("no queue has jobs, a pause or a worker")
        return 0
    table = Table(title=f"queues (schema {args.schema})")
    table.add_column("queue", no_wrap=True, min_width=max(len(q["queue"]) for q in queues))
    for state in JobState:
        table.add_column(state.value, justify="right")
    table.add_column("workers", justify="right")
    table.add_column("paused")
    for q in queues:
        table.add_row(
            escape(q["queue"]),
            *(str(q[state.value]) for state in JobState),
            str(q["workers"]),
            "[bold]paused[/bold]" if q["paused"] else "",
        )
    out.print(table)
    paused = [q for q in queues if q["paused"]]
    if paused:
        pauses = Table(title="paused queues: no worker claims from them")
        for column in ("queue", "since", "by", "ends", "reason"):
            pauses.add_column(column)
        for q in paused:
            pauses.add_row(
                escape(q["queue"]),
                _ago(q["paused_at"], now),
                escape(q["paused_by"]),
                _from_now(q["paused_until"], now),
                escape(q["pause_reason"]),
            )
        out.print(pauses)
    return 0


def pause_time(text: str) -> float | datetime:
    """An argparse type: a duration from now (30m, 2h), or an ISO 8601 time with a timezone."""
    try:
        return duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30m, 2h, 1d) nor an ISO 8601 time (2030-01-31T09:00:00+00:00)"
        ) from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no timezone; add one, like {text}+00:00 or {text}Z, so every host reads it alike"
        )
    return at


async def cmd_queues_pause(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        try:
            pause = await client.pause_queue(
                args.name,
                reason=args.reason,
                until=args.until,
                allow_unknown=args.allow_unknown,
                actor=args.actor,
            )
        except ControlRefused as exc:
            return _refused(exc)
    if args.json:
        emit_json(
            {
                "queue": pause.queue,
                "paused_at": pause.paused_at,
                "until": pause.until,
                "actor": pause.actor,
                "reason": pause.reason,
            }
        )
    else:
        if pause.until is None:
            until = "until resumed"
        else:
            ends = _from_now(pause.until, pause.paused_at)
            until = f"until {pause.until.isoformat(timespec='seconds')} (ends {ends})"
        out.print(
            f"queue {pause.queue!r} paused {until}: no worker claims from it (running jobs finish)",
            markup=False,
        )
    return 0


async def cmd_queues_resume(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        try:
            await client.resume_queue(args.name, reason=args.reason, actor=args.actor)
        except ControlRefused as exc:
            return _refused(exc)
    if args.json:
        emit_json({"queue": args.name, "resumed": True})
    else:
        out.print(f"queue {args.name!r} resumed; its workers were woken", markup=False)
    return 0


# -- result ------------------------------------------------------------------------------------


async def cmd_result(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        async with (await client.pool()).connection() as conn:
            row = await client.control.result(conn, args.id)
            step = None if row is not None else await client.control.unreleased_step(conn, args.id)
        if row is None and step is None:
            err.print(f"error: there is no job {args.id}")
            return EXIT_REFUSED
        try:
            done, value = settled(row, args.id, step)
            if not done:
                if args.wait is None:
                    err.print(
                        f"error: job {args.id} is {value}, not finished; it has no result yet. "
                        f"`tenure result {args.id} --wait 60` waits for it"
                    )
                    return EXIT_REFUSED
                value = await client.result(args.id, timeout=args.wait, poll=RESULT_POLL_SECONDS)
        except (JobFailed, ResultTimeout) as exc:
            err.print(f"error: {exc}", markup=False)
            return EXIT_REFUSED
    if not args.json:
        err.print(f"[dim]job {args.id} succeeded; its result:[/dim]")
    emit_json(value)
    return 0


async def cmd_unique_show(args: argparse.Namespace) -> int:
    async with client_for(args) as client, (await client.pool()).connection() as conn:
        rows = await client.control.unique_key_jobs(conn, args.key, limit=args.limit)
    if args.json:
        emit_json(rows)
        return 0 if rows else EXIT_REFUSED
    if not rows:
        err.print(
            f"error: no job carries the unique key {args.key!r} (keys read task:key, as "
            "`tenure enqueue --unique-key` prints them)",
            markup=False,
        )
        return EXIT_REFUSED
    holder = next((r for r in rows if r.holds), None)
    out.print(
        f"held by job {holder.id} ({holder.state})"
        if holder
        else "held by no job now: the next enqueue stores one",
        markup=False,
    )
    table = Table(title=f"jobs with unique key {args.key}")
    for column in ("id", "state", "holds it", "key", "enqueued", "finished"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r.id),
            r.state,
            "yes" if r.holds else "",
            escape(r.unique_key),
            f"{r.created_at:%Y-%m-%d %H:%M:%S}",
            f"{r.finished_at:%Y-%m-%d %H:%M:%S}" if r.finished_at else "",
        )
    out.print(table)
    return 0


async def cmd_limits_list(args: argparse.Namespace) -> int:
    async with client_for(args) as client, (await client.pool()).connection() as conn:
        rows = await client.control.limits(conn)
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        out.print("no queue has a global limit (declare one with app.limit(...))")
        return 0
    table = Table(title="global limits")
    for column in ("queue", "running now", "max running", "per key", "rate", "declared by"):
        table.add_column(column)
    for r in rows:
        per_key = f"{r.max_running_per_key} per {r.key_field}" if r.key_field else ""
        rate = f"{r.rate} per {r.per_seconds:g}s" if r.rate else ""
        table.add_row(
            escape(r.queue),
            str(r.running),
            "" if r.max_running is None else str(r.max_running),
            escape(per_key),
            rate,
            escape(r.declared_by),
        )
    out.print(table)
    return 0


async def cmd_limits_clear(args: argparse.Namespace) -> int:
    async with client_for(args) as client, (await client.pool()).connection() as conn:
        cleared = await client.control.clear_limit(conn, args.queue)
    if not cleared:
        err.print(f"error: queue {args.queue!r} has no limit; nothing was cleared", markup=False)
        return EXIT_REFUSED
    out.print(
        f"queue {args.queue}'s limit is cleared; a worker whose app declares it writes it again "
        "when it starts",
        markup=False,
    )
    return 0


# -- wiring ------------------------------------------------------------------------------------


def _actor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--actor", default=None, help="who; recorded with the reason (default: user@host)")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "cancel",
        parents=[common],
        help="cancel jobs by id or by filter; running ones are revoked",
        description=(
            "Cancels the jobs named by id (waiting, running or dead), or those a filter matches "
            "(waiting ones; with --running, running ones too). A running job is revoked: its lease "
            "ends at once, its worker is told, and every later write of its holder is refused; with "
            "--requeue it goes back to pending instead. All or nothing: a finished or unknown id "
            f"changes nothing. A filter takes at most {DEFAULT_MAX_JOBS} jobs unless --yes."
        ),
    )
    p.set_defaults(handler=cmd_cancel)
    p.add_argument("ids", type=int, nargs="*", help="job ids (or use a filter)")
    p.add_argument("--queue", default=None)
    p.add_argument("--task", default=None)
    p.add_argument(
        "--contains", default=None, help="jobs whose payload contains this JSON object, e.g. '{\"a\": 1}'"
    )
    p.add_argument(
        "--older-than", type=duration, default=None, help="enqueued at least this long ago (30m, 2d)"
    )
    p.add_argument("--running", action="store_true", help="the filter takes running jobs too (revoking them)")
    p.add_argument(
        "--requeue", action="store_true", help="give running jobs back to pending instead of cancelling them"
    )
    p.add_argument("--yes", action="store_true", help=f"let a filter take more than {DEFAULT_MAX_JOBS} jobs")
    p.add_argument("--reason", required=True, help="why; recorded in each job's history")
    _actor(p)

    p = sub.add_parser(
        "retry",
        parents=[common],
        help="run waiting jobs now; reprocess dead or cancelled ones",
        description="Runs scheduled or pending jobs now, and gives dead or cancelled ones fresh attempts. "
        "All or nothing: a running, succeeded or unknown id changes nothing.",
    )
    p.set_defaults(handler=cmd_retry)
    p.add_argument("ids", type=int, nargs="+", help="job ids")
    p.add_argument("--reason", required=True, help="why; recorded in each job's history")
    p.add_argument(
        "--attempts",
        type=positive_int,
        default=1,
        help=f"fresh attempts for a dead or cancelled job (default 1, at most {MAX_ATTEMPTS_LIMIT})",
    )
    _actor(p)

    p = sub.add_parser("queues", help="list queues; pause and resume them for every worker")
    queues = p.add_subparsers(dest="queues_command", required=True)

    q = queues.add_parser("list", parents=[common], help="every queue: jobs by state, pause, live workers")
    q.set_defaults(handler=cmd_queues_list)
    q.add_argument(
        "--stale-after", type=duration, default=60.0, help="a worker silent this long is not counted"
    )

    q = queues.add_parser(
        "pause",
        parents=[common],
        help="stop every worker claiming from a queue (running jobs finish)",
    )
    q.set_defaults(handler=cmd_queues_pause)
    q.add_argument("name", help="the queue")
    q.add_argument("--reason", required=True, help="why; recorded with the pause")
    q.add_argument(
        "--until",
        type=pause_time,
        default=None,
        help="end the pause by itself: a duration from now (30m, 2h) or an ISO 8601 time with a timezone",
    )
    q.add_argument(
        "--allow-unknown", action="store_true", help="pause a queue no job or worker has named yet"
    )
    _actor(q)

    q = queues.add_parser("resume", parents=[common], help="end a queue's pause; its workers wake at once")
    q.set_defaults(handler=cmd_queues_resume)
    q.add_argument("name", help="the queue")
    q.add_argument("--reason", default=None, help="why; recorded with the resume")
    _actor(q)

    p = sub.add_parser(
        "result",
        parents=[common],
        help="a job's result as JSON; --wait for an unfinished one",
        description="Prints the job's result (its handler's return value) as JSON on stdout. An "
        "unfinished job exits 1 unless --wait; a dead or cancelled one exits 1 with its last error.",
    )
    p.set_defaults(handler=cmd_result)
    p.add_argument("id", type=int)
    p.add_argument("--wait", type=duration, default=None, help="wait this long for it to finish (30, 5m)")

    p = sub.add_parser("unique", help="which job holds a unique key")
    unique = p.add_subparsers(dest="unique_command", required=True)
    u = unique.add_parser("show", parents=[common], help="the jobs with a unique key, and which holds it now")
    u.set_defaults(handler=cmd_unique_show)
    u.add_argument("key", help="the key as the enqueue reported it (task:key)")
    u.add_argument("--limit", type=positive_int, default=20)

    p = sub.add_parser("limits", help="global concurrency and rate limits of queues")
    limits = p.add_subparsers(dest="limits_command", required=True)
    lp = limits.add_parser("list", parents=[common], help="every limited queue, with its running jobs now")
    lp.set_defaults(handler=cmd_limits_list)
    lp = limits.add_parser("clear", parents=[common], help="remove a queue's limit")
    lp.set_defaults(handler=cmd_limits_clear)
    lp.add_argument("queue")

"""Periodic jobs from the command line: list schedules with their last and next fire, show
one's recent fires, pause and resume.

Exit codes: 0 done; 1 the database's state refused the verb and nothing was changed (no such
schedule, already paused, not paused, a role that may not pause); 2 the command itself is wrong
(an empty reason).
"""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from rich.markup import escape
from rich.table import Table

from tenure.db.schedule_queries import ListedSchedule, SchedulePause, ScheduleQueries, ScheduleResume
from tenure.model.actor import default_actor
from tenure.model.schedules import DEFAULT_STALE_AFTER
from tenure.ops.cli._common import EXIT_USAGE, as_dict, connected, emit_json, err, out, positive_int
from tenure.ops.cli._render import facts, plain, when
from tenure.ops.views.durations import duration, relative
from tenure.ops.views.schedules import PlannedSchedule, planned, refusal

EXIT_REFUSED = 1
MAX_REASON_CHARS = 2000


def resumed(row: ListedSchedule) -> str:
    """Who last resumed the schedule, when and why; '-' when it never was."""
    if row.resumed_at is None:
        return "-"
    said = f": {row.resume_reason}" if row.resume_reason else ""
    return f"{when(row.resumed_at, row.db_now)} by {row.resumed_by}{said}"


def next_fire_text(p: PlannedSchedule) -> str:
    """The list's next-fire cell: when it fires, or what keeps it from being planned."""
    if p.problem:
        return escape(p.problem)
    return "-" if p.status != "active" else relative(p.next_fire, p.schedule.db_now)


def listed_json(p: PlannedSchedule) -> dict[str, Any]:
    """A schedule as `--json` gives it: its columns (but the clock they were read at), then what
    this host makes of it."""
    columns = {k: v for k, v in as_dict(p.schedule).items() if k != "db_now"}
    return {**columns, "problem": p.problem, "next_fire": p.next_fire, "status": p.status}


async def cmd_list(args: argparse.Namespace) -> int:
    async with connected(args) as conn:
        rows = [planned(row, args.stale_after) for row in await ScheduleQueries(args.schema).list_all(conn)]
    if args.json:
        emit_json([listed_json(p) for p in rows])
        return 0
    if not rows:
        out.print(
            "no schedules: declare one with @app.periodic or app.schedule, and run a worker of that app"
        )
        return 0
    table = Table(title=f"schedules (schema {args.schema})")
    for column in ("name", "cron", "timezone", "task", "queue", "missed", "status", "last fire", "next fire"):
        table.add_column(column, no_wrap=column in ("name", "cron"))
    for p in rows:
        r = p.schedule
        status = escape(p.status)
        if p.status == "broken":
            status = "[bold red]broken[/bold red]"
        elif p.status == "paused":
            status = f"[bold]paused[/bold] {relative(r.paused_at, r.db_now)} by {escape(r.paused_by or '')}"
        if not r.paused and r.resumed_at is not None:
            status += f", resumed {relative(r.resumed_at, r.db_now)} by {escape(r.resumed_by or '')}"
        table.add_row(
            escape(r.name),
            escape(r.cron),
            escape(r.timezone),
            escape(r.task),
            escape(r.queue),
            r.missed,
            status,
            relative(r.last_fired_slot, r.db_now),
            next_fire_text(p),
        )
    out.print(table)
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    sq = ScheduleQueries(args.schema)
    async with connected(args) as conn:
        found = [r for r in await sq.list_all(conn) if r.name == args.name]
        if not found:
            return _unknown(args.name)
        fires = await sq.fires(conn, args.name, limit=args.limit)
    shown = planned(found[0], args.stale_after)
    if args.json:
        emit_json({"schedule": listed_json(shown), "fires": fires})
        return 0
    row = shown.schedule
    now = row.db_now
    upcoming = "-"
    if shown.problem:
        upcoming = shown.problem
    elif shown.status == "active":
        upcoming = when(shown.next_fire, now)
    status = shown.status
    if status == "paused":
        status = f"paused {relative(row.paused_at, now)} by {row.paused_by}: {row.pause_reason}"
    out.print(
        facts(
            [
                ("cron", f"{row.cron} ({row.timezone})"),
                ("task", row.task),
                ("queue", row.queue),
                ("payload", plain(row.payload)),
                ("priority", str(row.priority)),
                ("max attempts", str(row.max_attempts)),
                ("missed slots", row.missed),
                ("status", status),
                ("last resumed", resumed(row)),
                ("last fire", when(row.last_fired_slot, now)),
                ("next fire", upcoming),
                ("declared", when(row.declared_at, now)),
                ("created", when(row.created_at, now)),
            ],
            title=f"schedule {row.name}",
        )
    )
    table = Table(title=f"latest fires of {escape(args.name)}")
    for column in ("slot", "job", "job state", "fired by", "fired after the slot"):
        table.add_column(column)
    for f in fires:
        table.add_row(
            f.slot.isoformat(timespec="seconds"),
            str(f.job_id),
            f.job_state or "deleted by retention",
            escape(f.worker or ""),
            f"{(f.fired_at - f.slot).total_seconds():.3f}s",
        )
    out.print(table if fires else "it has not fired yet")
    return 0


def _unknown(name: str) -> int:
    err.print(f"error: there is no schedule named {name!r}; `tenure schedules list` shows them", markup=False)
    return EXIT_REFUSED


#: What a pause and a resume that were made say.
DONE = {
    "pause": "paused: no worker fires it until `tenure schedules resume`; the slots that fall due "
    "meanwhile are skipped",
    "resume": "resumed: it fires from its next slot on; the slots of the pause were skipped",
}


async def _change(args: argparse.Namespace, verb: str, reason: str | None) -> int:
    """Pauses or resumes (`verb`) the schedule `args.name`, as `args.actor` (default user@host)."""
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        err.print(f"error: --reason is {len(reason)} characters; keep it under {MAX_REASON_CHARS}")
        return EXIT_USAGE
    queries = ScheduleQueries(args.schema)
    actor = args.actor or default_actor()
    async with connected(args) as conn:
        change: SchedulePause | ScheduleResume | None
        try:
            if verb == "pause":
                change = await queries.pause(conn, args.name, actor=actor, reason=reason or "")
            else:
                change = await queries.resume(conn, args.name, actor=actor, reason=reason)
        except psycopg.errors.InsufficientPrivilege:
            err.print(
                f"error: this role may not {verb} schedules (an operator's act); run it as the admin "
                "role (see `tenure roles`). Nothing was changed",
                markup=False,
            )
            return EXIT_REFUSED
    if change is None:
        return _unknown(args.name)
    if refused := refusal(args.name, change):
        err.print(f"error: {refused}", markup=False)
        return EXIT_REFUSED
    if args.json:
        emit_json({"schedule": args.name, **as_dict(change)})
    else:
        out.print(f"schedule {args.name!r} {DONE[verb]}", markup=False)
    return 0


async def cmd_pause(args: argparse.Namespace) -> int:
    reason = (args.reason or "").strip()
    if not reason:
        err.print("error: --reason is empty; say why the schedule stops firing (it is kept with the pause)")
        return EXIT_USAGE
    return await _change(args, "pause", reason)


async def cmd_resume(args: argparse.Namespace) -> int:
    return await _change(args, "resume", (args.reason or "").strip() or None)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("schedules", help="periodic jobs: list, show, pause and resume schedules")
    schedules = p.add_subparsers(dest="schedules_command", required=True)

    stale = {
        "type": duration,
        "default": DEFAULT_STALE_AFTER,
        "help": "a schedule no worker registered for this long is not declared by any running worker",
    }
    q = schedules.add_parser("list", parents=[common], help="every schedule with its last and next fire")
    q.set_defaults(handler=cmd_list)
    q.add_argument("--stale-after", **stale)

    q = schedules.add_parser("show", parents=[common], help="one schedule and its latest fired slots")
    q.set_defaults(handler=cmd_show)
    q.add_argument("name", help="the schedule")
    q.add_argument("--limit", type=positive_int, default=20, help="how many fires to show (default 20)")
    q.add_argument("--stale-after", **stale)

    q = schedules.add_parser("pause", parents=[common], help="stop a schedule firing, for every worker")
    q.set_defaults(handler=cmd_pause)
    q.add_argument("name", help="the schedule")
    q.add_argument("--reason", required=True, help="why; kept with the pause")
    q.add_argument("--actor", default=None, help="who; kept with the pause (default: user@host)")

    q = schedules.add_parser(
        "resume", parents=[common], help="let a paused schedule fire again, from its next slot"
    )
    q.set_defaults(handler=cmd_resume)
    q.add_argument("name", help="the schedule")
    q.add_argument("--reason", default=None, help="why; kept with the resume")
    q.add_argument("--actor", default=None, help="who; kept with the resume (default: user@host)")

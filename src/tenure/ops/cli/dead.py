"""The dead-job workflow: list and filter, show with history, reprocess, purge."""

from __future__ import annotations

import argparse
import os
from typing import Any

import psycopg
from rich.table import Table

from tenure.db.control_queries import ControlQueries
from tenure.db.ops_queries import OpsQueries
from tenure.db.ops_rows import DeadFilter
from tenure.db.queries import Queries
from tenure.db.wait_queries import WaitQueries
from tenure.ops.cli._common import EXIT_USAGE, connected, emit_json, err, out, positive_int
from tenure.ops.cli._render import error_line, history_table, job_panel
from tenure.ops.cli.waits import waits_table
from tenure.ops.views.durations import duration, human
from tenure.producer.control import key_held

MAX_REASON_CHARS = 2000


def _filter(args: argparse.Namespace) -> DeadFilter:
    return DeadFilter(
        queue=args.queue, task=args.task, error_code=args.error_code, older_than=args.older_than
    )


async def cmd_list(args: argparse.Namespace, conn: Any) -> int:
    rows = await OpsQueries(args.schema).dead_search(conn, _filter(args), limit=args.limit)
    if args.json:
        emit_json(rows)
        return 0
    table = Table(title="dead jobs")
    for column in ("id", "queue", "task", "attempts", "error code", "dead for"):
        table.add_column(column, no_wrap=column in ("id", "attempts", "dead for"))
    # The error gets what is left of the width, wrapped rather than cut to an ellipsis.
    table.add_column("last error", overflow="fold", ratio=1, min_width=20)
    for r in rows:
        table.add_row(
            str(r.id),
            r.queue,
            r.task,
            f"{r.attempt_count}/{r.max_attempts}",
            r.last_error_code or "",
            human(r.age_seconds),
            error_line(r.last_error)[:80],
        )
    out.print(table if rows else "no dead jobs match")
    return 0


async def cmd_show(args: argparse.Namespace, conn: Any) -> int:
    queries = Queries(args.schema)
    job = await queries.job_get(conn, args.id)
    if job is None:
        err.print(f"error: no job with id {args.id}; `tenure dead list` shows the dead ones")
        return 1
    events = await queries.job_events_list(conn, args.id)
    if args.json:
        emit_json(
            {"job": job, "history": events, "waits": await WaitQueries(args.schema).waits_of(conn, args.id)}
        )
        return 0
    now = await ControlQueries(args.schema).db_now(conn)
    out.print(job_panel(job, now))
    waits = await WaitQueries(args.schema).waits_of(conn, args.id)
    if waits:
        out.print(waits_table(waits, now))
    if events:
        out.print(history_table(events, title=f"history of job {args.id}"))
    else:
        out.print("history: nothing off the happy path (no retry, expiry, fencing loss or operator act)")
    return 0


async def cmd_show_any(args: argparse.Namespace) -> int:
    """`tenure show ID`: any job, whatever its state."""
    async with connected(args) as conn:
        return await cmd_show(args, conn)


async def cmd_reprocess(args: argparse.Namespace, conn: Any) -> int:
    reason = (args.reason or "").strip()
    if not reason:
        err.print(
            "error: --reason is empty; say why these jobs should run again (it is kept in their history)"
        )
        return EXIT_USAGE
    if len(reason) > MAX_REASON_CHARS:
        err.print(f"error: --reason is {len(reason)} characters; keep it under {MAX_REASON_CHARS}")
        return EXIT_USAGE
    where = _filter(args)
    if not args.ids and where.empty and not args.all:
        err.print(
            "error: name the jobs: give job ids, or a filter (--queue, --task, --error-code, --older-than), "
            "or --all for every dead job"
        )
        return EXIT_USAGE
    ops = OpsQueries(args.schema)
    ids = sorted(set(args.ids)) if args.ids else None
    async with conn.transaction():
        moved = await ops.dead_reprocess_many(
            conn,
            where,
            ids=ids,
            actor=args.actor,
            reason=reason,
            attempts=args.attempts,
            limit=len(ids) if ids else args.limit,
        )
        refused = sorted(set(ids) - set(moved)) if ids else []
        if refused:
            raise _Refused(refused)  # rolls the whole batch back: nothing half-done
    if args.json:
        emit_json({"reprocessed": moved})
    elif moved:
        out.print(
            f"{len(moved)} job(s) pending again with {args.attempts} more attempt(s), ids and history kept: "
            + ", ".join(str(i) for i in moved[:20])
            + (" ..." if len(moved) > 20 else "")
        )
    else:
        out.print("no dead jobs match; nothing reprocessed")
    return 0


class _Refused(Exception):
    def __init__(self, ids: list[int]) -> None:
        super().__init__(ids)
        self.ids = ids


async def _explain_refusal(args: argparse.Namespace, conn: Any, ids: list[int]) -> int:
    queries = Queries(args.schema)
    parts = []
    for job_id in ids:
        job = await queries.job_get(conn, job_id)
        if job is None:
            parts.append(f"job {job_id} is missing")
        elif job.state.value == "dead":
            parts.append(f"job {job_id} does not match the filters given")
        else:
            parts.append(f"job {job_id} is {job.state.value}, not dead")
    err.print(f"error: {'; '.join(parts)}. Only dead jobs can be reprocessed; nothing was reprocessed")
    return 1


async def cmd_purge(args: argparse.Namespace, conn: Any) -> int:
    ops = OpsQueries(args.schema)
    if not args.yes:
        where = DeadFilter(queue=args.queue, older_than=args.older_than)
        matching = await ops.dead_search(conn, where, limit=100000)
        err.print(
            f"{len(matching)} dead job(s) dead for over {human(args.older_than)} would be deleted with their "
            "history; add --yes to delete them"
        )
        return EXIT_USAGE
    purged: list[int] = []
    while True:
        batch = await ops.dead_purge(conn, older_than=args.older_than, queue=args.queue, limit=1000)
        purged.extend(batch)
        if len(batch) < 1000:
            break
    if args.json:
        emit_json({"purged": len(purged), "ids": purged})
    else:
        out.print(
            f"deleted {len(purged)} dead job(s) dead for over {human(args.older_than)}, with their history"
        )
    return 0


async def cmd_dead(args: argparse.Namespace) -> int:
    async with connected(args) as conn:
        handler = {"list": cmd_list, "show": cmd_show, "reprocess": cmd_reprocess, "purge": cmd_purge}
        try:
            return int(await handler[args.dead_command](args, conn))
        except _Refused as refused:
            return await _explain_refusal(args, conn, refused.ids)
        except psycopg.errors.UniqueViolation as exc:
            raise key_held(exc, "reprocessed") from None


def _filter_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue", default=None)
    p.add_argument("--task", default=None)
    p.add_argument("--error-code", default=None, help="last error code, e.g. LEASE_EXPIRED or BAD_PAYLOAD")
    p.add_argument("--older-than", type=duration, default=None, help="dead for at least this long (30m, 2d)")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("show", parents=[common], help="one job, in any state, with its whole history")
    p.add_argument("id", type=int)
    p.set_defaults(handler=cmd_show_any)

    p = sub.add_parser("dead", help="inspect, reprocess and purge dead jobs")
    p.set_defaults(handler=cmd_dead)
    dead = p.add_subparsers(dest="dead_command", required=True)

    d = dead.add_parser("list", parents=[common], help="dead jobs, newest first, filtered")
    _filter_options(d)
    d.add_argument("--limit", type=positive_int, default=50)

    d = dead.add_parser("show", parents=[common], help="one job with its whole history")
    d.add_argument("id", type=int)

    d = dead.add_parser(
        "reprocess", parents=[common], help="dead jobs back to pending, keeping ids and history"
    )
    d.add_argument("ids", type=int, nargs="*", help="job ids (all must be dead, else nothing is done)")
    _filter_options(d)
    d.add_argument("--all", action="store_true", help="every dead job (with no ids and no filter)")
    d.add_argument("--reason", required=True, help="why; recorded in each job's history")
    d.add_argument("--attempts", type=positive_int, default=1, help="fresh attempts to grant (default 1)")
    d.add_argument("--limit", type=positive_int, default=1000, help="most jobs one filter run moves")
    d.add_argument(
        "--actor", default=os.environ.get("USER", "operator"), help="who; recorded with the reason"
    )

    d = dead.add_parser("purge", parents=[common], help="delete dead jobs past a retention age")
    d.add_argument("--older-than", type=duration, required=True, help="dead for longer than this (e.g. 30d)")
    d.add_argument("--queue", default=None)
    d.add_argument("--yes", action="store_true", help="really delete (without it: say how many)")

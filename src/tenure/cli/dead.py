"""The dead-job workflow: list, show with history, reprocess."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.table import Table

from tenure.cli._common import as_dict, emit_json, err, out, positive_int, resolve
from tenure.db.connect import connect
from tenure.db.migrate import require_current_schema
from tenure.db.queries import Queries


async def cmd_dead(args: argparse.Namespace) -> int:
    dsn = resolve(args).dsn
    queries = Queries(args.schema)
    async with await connect(dsn) as conn:
        await require_current_schema(conn, args.schema)
        if args.dead_command == "list":
            rows = await queries.dead_list(conn, queue=args.queue, limit=args.limit)
            if args.json:
                emit_json(rows)
                return 0
            table = Table(title="dead jobs")
            for column in ("id", "queue", "task", "attempts", "error code", "finished"):
                table.add_column(column)
            for r in rows:
                table.add_row(
                    str(r["id"]),
                    r["queue"],
                    r["task"],
                    f"{r['attempt_count']}/{r['max_attempts']}",
                    r["last_error_code"] or "",
                    r["finished_at"].isoformat(timespec="seconds"),
                )
            out.print(table if rows else "no dead jobs")
            return 0
        if args.dead_command == "show":
            job = await queries.job_get(conn, args.id)
            if job is None:
                err.print(f"error: no job with id {args.id}")
                return 1
            events = await queries.job_events_list(conn, args.id)
            if args.json:
                emit_json(
                    {
                        "job": job.__dict__ if hasattr(job, "__dict__") else as_dict(job),
                        "history": [as_dict(e) for e in events],
                    }
                )
                return 0
            out.print(as_dict(job))
            table = Table(title=f"history of job {args.id}")
            for column in ("at", "event", "from", "to", "token", "worker", "code"):
                table.add_column(column)
            for e in events:
                table.add_row(
                    e.at.isoformat(timespec="milliseconds"),
                    e.event,
                    e.from_state or "",
                    e.to_state or "",
                    str(e.token),
                    e.worker or "",
                    e.error_code or "",
                )
            out.print(table)
            return 0
        # reprocess
        ok = await queries.job_reprocess(
            conn, args.id, attempts=args.attempts, actor=args.actor, reason=args.reason
        )
        if not ok:
            job = await queries.job_get(conn, args.id)
            state = job.state.value if job else "missing"
            err.print(
                f"error: job {args.id} is {state}, not dead or cancelled; only those can be reprocessed"
            )
            return 1
        if args.json:
            emit_json({"reprocessed": args.id})
        else:
            out.print(f"job {args.id} is pending again with {args.attempts} more attempt(s); history kept")
        return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("dead", help="inspect and reprocess dead jobs")
    p.set_defaults(handler=cmd_dead)
    dead = p.add_subparsers(dest="dead_command", required=True)
    d = dead.add_parser("list", parents=[common])
    d.add_argument("--queue", default=None)
    d.add_argument("--limit", type=positive_int, default=50)
    d = dead.add_parser("show", parents=[common])
    d.add_argument("id", type=int)
    d = dead.add_parser("reprocess", parents=[common])
    d.add_argument("id", type=int)
    d.add_argument("--reason", required=True, help="why; kept in the job's history")
    d.add_argument("--attempts", type=positive_int, default=1, help="fresh attempts to grant (default 1)")
    d.add_argument("--actor", default=os.environ.get("USER", "operator"))

"""`tenure ordering`: keys blocked by a dead job, and skipping that job."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.table import Table

from tenure.db.ordering_queries import OrderingQueries
from tenure.ops.cli._common import connected, emit_json, err, out, positive_int


async def cmd_ordering(args: argparse.Namespace) -> int:
    queries = OrderingQueries(args.schema)
    async with connected(args) as conn:
        if args.ordering_command == "blocked":
            rows = await queries.blocked(conn, ordering_key=args.key, limit=args.limit)
            if args.json:
                emit_json(rows)
                return 0
            table = Table(title="ordering keys blocked by a dead job")
            for column in ("key", "dead job", "queue", "task", "error code", "waiting behind", "dead since"):
                table.add_column(column)
            for r in rows:
                table.add_row(
                    r.ordering_key,
                    str(r.id),
                    r.queue,
                    r.task,
                    r.last_error_code or "",
                    str(r.waiting),
                    r.finished_at.isoformat(timespec="seconds"),
                )
            out.print(table if rows else "no ordering key is blocked")
            return 0
        skipped = await queries.skip(conn, args.id, actor=args.actor, reason=args.reason)
        if skipped is None:
            err.print(
                f"error: job {args.id} is not a dead or pending job with an ordering key; "
                "see `tenure ordering blocked`"
            )
            return 1
        if args.json:
            emit_json({"skipped": args.id, "ordering_key": skipped.ordering_key})
        else:
            out.print(f"job {args.id} cancelled; key {skipped.ordering_key!r} moves on to its next job")
        return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ordering", help="per-key ordering: blocked keys, skip a dead head")
    p.set_defaults(handler=cmd_ordering)
    ordering = p.add_subparsers(dest="ordering_command", required=True)
    d = ordering.add_parser("blocked", parents=[common], help="dead jobs that hold up their key")
    d.add_argument("--key", default=None, help="only this ordering key")
    d.add_argument("--limit", type=positive_int, default=100)
    d = ordering.add_parser("skip", parents=[common], help="cancel a dead (or pending) keyed job")
    d.add_argument("id", type=int)
    d.add_argument("--reason", required=True, help="why; kept in the job's history")
    d.add_argument("--actor", default=os.environ.get("USER", "operator"))

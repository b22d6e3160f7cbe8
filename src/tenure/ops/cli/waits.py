"""`tenure signal` and `tenure waits`: send a signal, see the jobs that wait, end a wait."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rich.table import Table

from tenure.db.control_queries import ControlQueries
from tenure.db.wait_queries import WaitQueries
from tenure.model.waits import WaitRecord
from tenure.ops.cli._common import EXIT_USAGE, client_for, connected, emit_json, err, out, positive_int
from tenure.ops.views.durations import duration, human, relative
from tenure.ops.views.waits import wait_ending


async def cmd_signal(args: argparse.Namespace) -> int:
    try:
        payload = None if args.payload is None else json.loads(args.payload)
    except json.JSONDecodeError as exc:
        err.print(f"error: --payload is not valid JSON ({exc}); give e.g. '{{\"approved\": true}}'")
        return EXIT_USAGE
    async with client_for(args) as client:
        sent = await client.signal(args.key, payload, idempotency_key=args.idempotency_key, keep=args.keep)
    if args.json:
        emit_json(sent)
        return 0
    if sent.outcome == "delivered":
        out.print(f"signal {sent.signal_id} to {args.key!r} woke job {sent.job_id}, which runs again now")
    elif sent.outcome == "kept":
        out.print(
            f"signal {sent.signal_id} to {args.key!r}: no job waits for it yet; it is kept for the "
            f"next that does, for {'7.0d' if args.keep is None else human(args.keep)}"
        )
    else:
        delivered = f", delivered to job {sent.job_id}" if sent.job_id else ", still kept"
        out.print(
            f"a signal to {args.key!r} with idempotency key {args.idempotency_key!r} was sent before "
            f"(signal {sent.signal_id}{delivered}): nothing was written"
        )
    return 0


async def cmd_waits(args: argparse.Namespace) -> int:
    if args.waits_command == "end":
        async with client_for(args) as client:
            name = await client.end_wait(args.id, reason=args.reason, actor=args.actor)
        if args.json:
            emit_json({"job": args.id, "wait": name, "outcome": "ended"})
        else:
            out.print(
                f"job {args.id}: wait {name!r} ended; the job runs again now and its wait returns `ended`"
            )
        return 0
    async with connected(args) as conn:
        queries = WaitQueries(args.schema)
        rows = await queries.waiting(conn, queue=args.queue, limit=args.limit)
        summary = await queries.summary(conn)
        if args.json:
            emit_json({"waiting": rows, "signals": summary})
            return 0
        now = rows[0].db_now if rows else await ControlQueries(args.schema).db_now(conn)
    table = Table(title=f"jobs waiting ({summary.waiting})")
    for column in ("job", "queue", "task", "wait", "for", "since", "until"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r.job_id),
            r.queue,
            r.task,
            r.name,
            f"signal {r.key}" if r.key else "time",
            relative(r.since, now),
            relative(r.deadline, now) if r.deadline else "no deadline",
        )
    out.print(table if rows else "no job is waiting for a signal or a time")
    oldest = f", the oldest sent {relative(summary.oldest_kept_at, now)}" if summary.oldest_kept_at else ""
    out.print(
        f"signals: {summary.kept} kept for a waiter{oldest}; {summary.delivered} delivered; "
        f"{summary.expired} dropped unread past their keeping time"
    )
    return 0


def waits_table(waits: list[WaitRecord], now: Any) -> Table:
    """A job's waits, for `tenure show`: what each waited for, and how it ended."""
    table = Table(title="waits")
    for column in ("wait", "for", "began", "until", "ended", "how", "signal"):
        table.add_column(column)
    for w in waits:
        signal = "" if w.signal_id is None else f"{w.signal_id}: {json.dumps(w.payload)[:60]}"
        table.add_row(
            w.name,
            f"signal {w.key}" if w.key else "time",
            relative(w.since, now),
            relative(w.deadline, now) if w.deadline else "no deadline",
            relative(w.resolved_at, now) if w.resolved_at else "",
            wait_ending(w),
            signal,
        )
    return table


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "signal",
        parents=[common],
        help="send a signal: wake the job waiting longest for KEY, or keep it for the next",
    )
    p.set_defaults(handler=cmd_signal)
    p.add_argument(
        "key", help="what is awaited, e.g. approve:order-7 (the key a handler's ctx.wait_for names)"
    )
    p.add_argument("--payload", default=None, help="JSON handed to the waiting handler (default: null)")
    p.add_argument(
        "--idempotency-key", default=None, help="a second signal to KEY with this key writes nothing"
    )
    p.add_argument(
        "--keep",
        type=duration,
        default=None,
        help="how long to keep it when none waits: 30m, 2d (default 7d)",
    )

    p = sub.add_parser("waits", help="jobs waiting for a signal or a time; end a wait")
    p.set_defaults(handler=cmd_waits)
    waits = p.add_subparsers(dest="waits_command", required=True)
    w = waits.add_parser("list", parents=[common], help="jobs waiting now, longest first, and the mailbox")
    w.add_argument("--queue", default=None, help="only this queue's")
    w.add_argument("--limit", type=positive_int, default=100)
    w = waits.add_parser(
        "end", parents=[common], help="end a job's wait: it runs again now, its wait `ended`"
    )
    w.add_argument("id", type=int, help="the waiting job's id (from `tenure waits list`)")
    w.add_argument("--reason", required=True, help="why; kept in the job's history")
    w.add_argument("--actor", default=os.environ.get("USER", "operator"))

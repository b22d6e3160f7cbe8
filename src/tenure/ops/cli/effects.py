"""`tenure effects`: list the effect ledger and resolve uncertain effects."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rich.table import Table

from tenure.db.effects_queries import EffectQueries
from tenure.ops.cli._common import EXIT_USAGE, connected, emit_json, err, out, positive_int


async def cmd_effects(args: argparse.Namespace) -> int:
    queries = EffectQueries(args.schema)
    async with connected(args) as conn:
        if args.effects_command == "list":
            state = "uncertain" if args.uncertain else args.state
            rows = await queries.list(conn, state=state, job_id=args.job, limit=args.limit)
            if args.json:
                emit_json(rows)
                return 0
            table = Table(title=f"{state or 'all'} effects")
            for column in ("effect id", "job", "task", "name", "state", "job state", "since", "resolved by"):
                table.add_column(column)
            for r in rows:
                table.add_row(
                    str(r.id),
                    str(r.job_id),
                    r.task,
                    r.name,
                    r.state,
                    r.job_state,
                    r.updated_at.isoformat(timespec="seconds"),
                    r.resolved_by or "",
                )
            out.print(table if rows else f"no {state or ''} effects".replace("  ", " "))
            return 0
        # resolve
        outcome: Any = None
        if args.outcome is not None:
            try:
                outcome = json.loads(args.outcome)
            except json.JSONDecodeError as exc:
                err.print(f'error: --outcome is not valid JSON ({exc}); give e.g. \'{{"charge": "ch_1"}}\'')
                return EXIT_USAGE
        state = "done" if args.confirmed else "not_happened"
        resolved = await queries.resolve(
            conn, effect_id=args.id, state=state, actor=args.actor, reason=args.reason, outcome=outcome
        )
        if resolved is None:
            err.print(
                f"error: effect {args.id} is not uncertain (or its job is running); "
                "see `tenure effects list --json`"
            )
            return 1
        result = {"effect": args.id, "state": state, "job": resolved.job_id, "job_state": resolved.job_state}
        if args.json:
            emit_json(result)
        else:
            verdict = (
                "done: it will not be performed again"
                if args.confirmed
                else "not happened: the next attempt performs it"
            )
            out.print(f"effect {args.id} resolved as {verdict}")
            if resolved.job_state == "dead":
                out.print(
                    f"job {resolved.job_id} is dead: "
                    f"`tenure dead reprocess {resolved.job_id} --reason ...` runs it again"
                )
        return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("effects", help="the effect ledger: list and resolve uncertain external effects")
    p.set_defaults(handler=cmd_effects)
    effects = p.add_subparsers(dest="effects_command", required=True)
    d = effects.add_parser("list", parents=[common])
    d.add_argument("--uncertain", action="store_true", help="only effects waiting for a decision")
    d.add_argument("--state", choices=["intent", "done", "uncertain", "not_happened"], default=None)
    d.add_argument("--job", type=int, default=None, help="only this job's effects")
    d.add_argument("--limit", type=positive_int, default=100)
    d = effects.add_parser("resolve", parents=[common])
    d.add_argument("id", type=int, help="the effect id (from `tenure effects list`)")
    verdict = d.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--confirmed", action="store_true", help="it happened: never perform it again")
    verdict.add_argument("--not-happened", action="store_true", help="it did not happen: perform it again")
    d.add_argument("--outcome", default=None, help="JSON outcome to record with --confirmed")
    d.add_argument("--reason", required=True, help="why; kept on the effect")
    d.add_argument("--actor", default=os.environ.get("USER", "operator"))

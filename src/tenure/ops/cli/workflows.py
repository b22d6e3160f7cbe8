"""Workflows from the command line: list the latest, show one's steps with what each waits for,
cancel one, retry its dead steps.

Exit codes: 0 done; 1 the database's state refused the verb and nothing was changed (no such
workflow, a cancelled workflow to retry, a role that may not cancel); 2 the command itself is
wrong (an empty reason).
"""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from rich.markup import escape
from rich.table import Table

from tenure.model.errors import ValidationError
from tenure.model.validation import MAX_ATTEMPTS_LIMIT
from tenure.model.workflows import WorkflowStep, WorkflowSummary
from tenure.ops.cli._common import EXIT_USAGE, as_dict, client_for, emit_json, err, out, positive_int
from tenure.ops.cli._render import error_line, facts, when
from tenure.ops.views.durations import relative
from tenure.ops.views.values import shown_value
from tenure.producer.control import ControlRefused

EXIT_REFUSED = 1

#: The longest published value shown whole in `tenure workflows show`, in characters of JSON.
SHOWN_VALUE = 120
#: How each step state is drawn: what needs a person stands out.
STYLE = {
    "succeeded": "green",
    "running": "bold cyan",
    "dead": "bold red",
    "held": "bold yellow",
    "cancelled": "dim",
    "waiting": "",
    "pending": "cyan",
    "scheduled": "cyan",
}


def styled(state: str) -> str:
    style = STYLE.get(state, "")
    return f"[{style}]{state}[/{style}]" if style else state


def progress(w: WorkflowSummary) -> str:
    """'12/20 succeeded, 3 running, 5 waiting': the counts that are not zero."""
    parts = [f"{w.succeeded}/{w.steps} succeeded"]
    for label, n in (
        ("running", w.running),
        ("queued", w.queued),
        ("waiting", w.waiting),
        ("held", w.held),
        ("dead", w.dead),
        ("cancelled", w.cancelled),
    ):
        if n:
            parts.append(f"{n} {label}")
    return ", ".join(parts)


async def cmd_list(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        rows = await client.list_workflows(limit=args.limit)
    if args.json:
        emit_json([{**as_dict(w), "state": w.state} for w in rows])
        return 0
    if not rows:
        out.print("no workflows yet: enqueue one with app.enqueue_workflow (see docs/workflows.md)")
        return 0
    table = Table(title=f"latest workflows (schema {args.schema})")
    for column in ("id", "name", "state", "steps", "created", "last step finished"):
        table.add_column(column, no_wrap=column in ("id", "state"))
    for w in rows:
        table.add_row(
            str(w.id),
            escape(w.name),
            styled(w.state),
            progress(w),
            relative(w.created_at, w.db_now),
            relative(w.last_finished_at, w.db_now),
        )
    out.print(table)
    return 0


def _step_row(s: WorkflowStep, now: Any) -> list[str]:
    state = s.shown_state
    detail = ""
    if s.state == "waiting" and s.remaining == 0:
        detail = "its dependencies succeeded: the workflow pass is gathering its input"
    elif s.state == "waiting":
        detail = f"{s.remaining} of {len(s.after)} to succeed"
    elif s.job_state == "dead" or (s.last_error and state not in ("succeeded",)):
        detail = escape(error_line(s.last_error))
    if s.condition and s.condition_state in (None, "waiting"):
        since = f", waiting since {relative(s.condition_since, now)}" if s.condition_since else ""
        detail = ", ".join(filter(None, [detail, escape(s.condition_text) + since]))
    elif s.condition_state is not None and s.condition_state != "cancelled":
        detail = ", ".join(filter(None, [detail, f"its condition: {s.condition_state.replace('_', ' ')}"]))
    return [
        escape(s.name),
        escape(s.task),
        styled(state),
        escape(", ".join(s.after)) or "-",
        str(s.job_id),
        f"{s.attempts}/{s.max_attempts}",
        relative(s.finished_at, now) if s.finished_at else "-",
        detail,
    ]


async def cmd_show(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        found = await client.get_workflow(args.id)
        if found is None:
            return _unknown(args.id)
        steps = await client.workflow_steps(args.id, limit=args.limit)
        values = await client.workflow_published(args.id)
    if args.json:
        emit_json({"workflow": {**as_dict(found), "state": found.state}, "steps": steps, "published": values})
        return 0
    now = found.db_now
    rows = [
        ("state", found.state),
        ("steps", progress(found)),
        ("after a dead step", "hold the steps after it" if found.on_dead == "hold" else "cancel them"),
        ("created", when(found.created_at, now)),
    ]
    if found.cancelled_at is not None:
        by = escape(f"{found.cancelled_by}: {found.cancel_reason}")
        rows.append(("cancelled", f"{when(found.cancelled_at, now)} by {by}"))
    out.print(facts(rows, title=f"workflow {found.id}: {escape(found.name)}"))
    table = Table(title="steps, in the order they were declared")
    for column in ("step", "task", "state", "after", "job", "attempts", "finished", "note"):
        table.add_column(column, no_wrap=column in ("step", "state", "job"))
    for s in steps:
        table.add_row(*_step_row(s, now))
    out.print(table)
    if len(steps) == args.limit and found.steps > args.limit:
        out.print(f"showing the first {args.limit} of {found.steps} steps: --limit shows more")
    if values:
        published = Table(title="values its steps published (ctx.publish)")
        for column in ("key", "value", "published", "by job"):
            published.add_column(column, no_wrap=column != "value")
        for v in values:
            published.add_row(
                escape(v.key),
                escape(shown_value(v.value, SHOWN_VALUE)),
                relative(v.published_at, now),
                str(v.by_job),
            )
        out.print(published)
    return 0


def _unknown(workflow_id: int) -> int:
    err.print(f"error: there is no workflow {workflow_id}; `tenure workflows list` shows them", markup=False)
    return EXIT_REFUSED


def _reason(args: argparse.Namespace, what: str) -> str | None:
    reason = (args.reason or "").strip()
    if not reason:
        err.print(f"error: --reason is empty; say why you {what} (it is kept in each step's history)")
    return reason or None


async def cmd_cancel(args: argparse.Namespace) -> int:
    reason = _reason(args, "cancel the workflow")
    if reason is None:
        return EXIT_USAGE
    async with client_for(args) as client:
        try:
            done = await client.cancel_workflow(args.id, reason=reason, actor=args.actor)
        except ValidationError as exc:
            err.print(f"error: {exc}", markup=False)
            return EXIT_REFUSED
        except (psycopg.errors.InsufficientPrivilege, ControlRefused):
            err.print(
                "error: this role may not cancel jobs (an operator's act); run it as the admin role "
                "(see `tenure roles`). Nothing was changed",
                markup=False,
            )
            return EXIT_REFUSED
    if args.json:
        emit_json(done)
    elif done.outcome == "already":
        out.print(f"workflow {args.id} was already cancelled; nothing was changed")
    else:
        out.print(
            f"workflow {args.id} cancelled: {done.steps_cancelled} waiting steps cancelled, "
            f"{len(done.jobs_cancelled)} queued or running step jobs cancelled or revoked"
        )
    return 0


async def cmd_retry(args: argparse.Namespace) -> int:
    reason = _reason(args, "retry the workflow")
    if reason is None:
        return EXIT_USAGE
    async with client_for(args) as client:
        try:
            ids = await client.retry_workflow(
                args.id, reason=reason, attempts=args.attempts, actor=args.actor
            )
        except (ValidationError, ControlRefused) as exc:
            err.print(f"error: {exc}", markup=False)
            return EXIT_REFUSED
    if args.json:
        emit_json({"workflow": args.id, "reprocessed": ids})
    elif not ids:
        out.print(f"workflow {args.id} has no dead step: nothing to retry")
    else:
        steps = "1 dead step" if len(ids) == 1 else f"{len(ids)} dead steps"
        jobs = f"job {ids[0]}" if len(ids) == 1 else f"jobs {', '.join(map(str, ids))}"
        out.print(
            f"workflow {args.id}: {steps} reprocessed ({jobs}); the steps they held run once they succeed"
        )
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("workflows", help="workflows: list, show, cancel and retry")
    workflows = p.add_subparsers(dest="workflows_command", required=True)

    q = workflows.add_parser("list", parents=[common], help="the latest workflows with their steps counted")
    q.set_defaults(handler=cmd_list)
    q.add_argument("--limit", type=positive_int, default=50, help="how many (default 50)")

    q = workflows.add_parser("show", parents=[common], help="one workflow's steps, states and dependencies")
    q.set_defaults(handler=cmd_show)
    q.add_argument("id", type=int, help="the workflow's id")
    q.add_argument("--limit", type=positive_int, default=200, help="how many steps to show (default 200)")

    q = workflows.add_parser(
        "cancel", parents=[common], help="cancel every step still to run; running ones are revoked"
    )
    q.set_defaults(handler=cmd_cancel)
    q.add_argument("id", type=int, help="the workflow's id")
    q.add_argument("--reason", required=True, help="why; kept in each cancelled step's history")
    q.add_argument("--actor", default=None, help="who (default: user@host)")

    q = workflows.add_parser(
        "retry", parents=[common], help="reprocess a workflow's dead steps; the steps they held then run"
    )
    q.set_defaults(handler=cmd_retry)
    q.add_argument("id", type=int, help="the workflow's id")
    q.add_argument("--reason", required=True, help="why; kept in each step's history")
    q.add_argument(
        "--attempts",
        type=positive_int,
        default=1,
        help=f"more attempts for each dead step (default 1, at most {MAX_ATTEMPTS_LIMIT})",
    )
    q.add_argument("--actor", default=None, help="who (default: user@host)")

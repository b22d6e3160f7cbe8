"""The `tenure` command."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from tenure.app import Tenure
from tenure.client import Client
from tenure.db.connect import DSN_ENV, ResolvedDsn, connect, resolve_dsn
from tenure.db.migrate import migrate, require_current_schema
from tenure.db.queries import Queries
from tenure.errors import DatabaseUnavailable, SchemaNotMigrated, TenureError
from tenure.runtime.options import WorkerOptions
from tenure.runtime.recovery import Recovery
from tenure.runtime.services import WorkerServices

out = Console()
err = Console(stderr=True)

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_MIGRATED = 4


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def emit_json(data: Any) -> None:
    print(json.dumps(data, default=_json_default, indent=2))


def _resolve(args: argparse.Namespace) -> ResolvedDsn:
    resolved = resolve_dsn(args.dsn)
    if resolved.embedded and not getattr(args, "json", False):
        err.print(
            f"[dim]using the embedded PostgreSQL in {resolved.data_dir} (set --dsn or {DSN_ENV} "
            "to use your own server)[/dim]"
        )
    return resolved


def _run(coro: Awaitable[int]) -> int:
    return asyncio.run(coro)  # type: ignore[arg-type]


# -- commands ---------------------------------------------------------------------------------


async def cmd_migrate(args: argparse.Namespace) -> int:
    dsn = _resolve(args).dsn
    async with await connect(dsn) as conn:
        report = await migrate(conn, args.schema)
    if args.json:
        emit_json({"schema": report.schema, "applied": report.applied, "version": report.current})
    elif report.applied:
        out.print(
            f"schema {report.schema!r}: applied migrations {report.applied}; now at version {report.current}"
        )
    else:
        out.print(f"schema {report.schema!r} is up to date (version {report.current})")
    return 0


async def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        err.print(f"error: --payload is not valid JSON ({exc}); give an object like '{{\"n\": 1}}'")
        return EXIT_USAGE
    client = Client(_resolve(args).dsn, schema=args.schema)
    spec = client.builder.spec(
        args.task,
        payload,
        queue=args.queue,
        priority=args.priority,
        delay=args.delay,
        max_attempts=args.max_attempts,
    )
    async with client:
        if args.count > 1:
            n = await client.enqueue_copy([spec] * args.count)
            result: dict[str, Any] = {"enqueued": n}
        else:
            job = await client.enqueue_many([spec])
            result = {"id": job[0].id, "idempotency_key": str(job[0].idempotency_key)}
    if args.json:
        emit_json(result)
    else:
        out.print(result)
    return 0


def load_app(target: str) -> Tenure:
    """`module` (with a Tenure instance in it) or `module:attribute`."""
    module_name, _, attr = target.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TenureError(f"cannot import {module_name!r} ({exc}); give an importable module path") from None
    if attr:
        app = getattr(module, attr, None)
    else:
        apps = [v for v in vars(module).values() if isinstance(v, Tenure)]
        app = apps[0] if len(apps) == 1 else None
        if len(apps) > 1:
            raise TenureError(f"{module_name} defines several Tenure apps; name one as {module_name}:NAME")
    if not isinstance(app, Tenure):
        raise TenureError(f"no Tenure app found in {target!r}; define `app = tenure.Tenure()` there")
    return app


async def cmd_worker(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    app.dsn = args.dsn or app.dsn
    app.dsn = _resolve(argparse.Namespace(dsn=app.dsn, json=False)).dsn
    if args.schema_given:
        app.schema = args.schema
    options = WorkerOptions(
        queues=args.queues.split(",") if args.queues else None,
        concurrency=args.concurrency,
        lease_seconds=args.lease,
        max_runtime_seconds=args.max_runtime,
        poll_interval=args.poll_interval,
        shutdown_grace=args.grace,
        listen=not args.no_listen,
        **({"worker_id": args.worker_id} if args.worker_id else {}),
    )
    worker = app.worker(options)
    stats = await worker.run(handle_signals=True)
    if args.json:
        emit_json(stats.as_dict())
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    dsn = _resolve(args).dsn
    async with await connect(dsn) as conn:
        await require_current_schema(conn, args.schema)
        async with conn.transaction():  # one snapshot for the whole report (T6)
            rows = await Queries(args.schema).queue_stats(conn, near_expiry_seconds=args.near_expiry)
    queues: dict[str, dict[str, Any]] = {}
    for r in rows:
        q = queues.setdefault(
            r.queue, {"queue": r.queue, "counts": {}, "oldest_claimable_age_s": None, "leases_near_expiry": 0}
        )
        q["counts"][r.state.value] = r.jobs
        if r.oldest_claimable_at is not None:
            q["oldest_claimable_age_s"] = round((r.db_now - r.oldest_claimable_at).total_seconds(), 3)
        q["leases_near_expiry"] += r.leases_near_expiry
    if args.json:
        emit_json(list(queues.values()))
        return 0
    table = Table(title=f"Tenure queues (schema {args.schema})")
    for column in (
        "queue",
        "pending",
        "running",
        "succeeded",
        "dead",
        "cancelled",
        "oldest claimable",
        "near expiry",
    ):
        table.add_column(column, justify="left" if column == "queue" else "right")
    for q in queues.values():
        c = q["counts"]
        age = q["oldest_claimable_age_s"]
        table.add_row(
            q["queue"],
            *(str(c.get(s, 0)) for s in ("pending", "running", "succeeded", "dead", "cancelled")),
            "-" if age is None else f"{age:.1f}s",
            str(q["leases_near_expiry"]),
        )
    if not queues:
        out.print("no jobs yet")
    else:
        out.print(table)
    return 0


async def cmd_dead(args: argparse.Namespace) -> int:
    dsn = _resolve(args).dsn
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
                        "job": job.__dict__ if hasattr(job, "__dict__") else _as_dict(job),
                        "history": [_as_dict(e) for e in events],
                    }
                )
                return 0
            out.print(_as_dict(job))
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


def _as_dict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


async def cmd_recover(args: argparse.Namespace) -> int:
    from tenure.db.connect import open_pool

    dsn = _resolve(args).dsn
    pool = await open_pool(dsn, min_size=1, max_size=2, name="tenure-recover")
    try:
        async with pool.connection() as conn:
            await require_current_schema(conn, args.schema)
        services = WorkerServices(
            pool=pool,
            queries=Queries(args.schema),
            options=WorkerOptions(worker_id="tenure-recover"),
            dsn=dsn,
        )
        recovered = await Recovery(services).run_once()
    finally:
        await pool.close()
    summary = {
        "recovered": len(recovered),
        "to_pending": sum(1 for r in recovered if r.state.value == "pending"),
        "to_dead": sum(1 for r in recovered if r.state.value == "dead"),
    }
    if args.json:
        emit_json(summary)
    else:
        out.print(summary)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.demo.run import run_demo

    return run_demo(args)


# -- parser -----------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """An argparse type for counts that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=None, help=f"PostgreSQL DSN (default ${DSN_ENV}, else embedded)")
    common.add_argument("--schema", default="tenure", help="Tenure schema name (default: tenure)")
    common.add_argument("--json", action="store_true", help="machine-readable output")

    parser = argparse.ArgumentParser(prog="tenure", description="A durable PostgreSQL job queue.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", parents=[common], help="create or upgrade the Tenure schema")

    p = sub.add_parser("enqueue", parents=[common], help="enqueue a job")
    p.add_argument("task")
    p.add_argument("--payload", default="{}", help="JSON object of keyword arguments")
    p.add_argument("--queue", default=None)
    p.add_argument("--priority", type=int, default=None)
    p.add_argument("--delay", type=float, default=None, help="seconds before the job may run")
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--count", type=positive_int, default=1, help="enqueue this many copies through COPY")

    p = sub.add_parser("worker", parents=[common], help="run a worker for the tasks of an app")
    p.add_argument("app", help="module (or module:attribute) defining a tenure.Tenure app")
    p.add_argument("--queues", default=None, help="comma-separated queues (default: the tasks' queues)")
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--lease", type=float, default=30.0, help="lease seconds (renewed on progress)")
    p.add_argument("--max-runtime", type=float, default=3600.0, help="hard limit per attempt, seconds")
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--grace", type=float, default=10.0, help="seconds running jobs get at shutdown")
    p.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    p.add_argument("--worker-id", default=None)

    p = sub.add_parser("status", parents=[common], help="queues at a glance")
    p.add_argument("--near-expiry", type=float, default=10.0, help="seconds that count as near expiry")

    p = sub.add_parser("dead", help="inspect and reprocess dead jobs")
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

    sub.add_parser("recover", parents=[common], help="recover expired leases now")

    p = sub.add_parser("demo", parents=[common], help="bank transfers under real crashes, then a report")
    p.add_argument("--transfers", type=int, default=3000)
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--lease", type=float, default=2.0)
    p.add_argument("--no-faults", action="store_true", help="skip the SIGKILL and SIGSTOP")
    p.add_argument(
        "--database",
        default="tenure_demo",
        help="the demo's own database, dropped and recreated on each run (name must start with tenure_demo)",
    )
    p.add_argument("--concurrency", type=int, default=10, help="jobs in flight per worker")
    p.add_argument("--timeout", type=float, default=120.0, help="give up (and fail) after this many seconds")
    p.add_argument("--seed", type=int, default=None, help="seed for the accounts and transfers")
    p.add_argument("--keep-logs", action="store_true", help="keep the worker logs even when all is well")
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "migrate": cmd_migrate,
    "enqueue": cmd_enqueue,
    "worker": cmd_worker,
    "status": cmd_status,
    "dead": cmd_dead,
    "recover": cmd_recover,
}


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(raw)
    args.schema_given = "--schema" in raw or any(a.startswith("--schema=") for a in raw)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "demo":
            return cmd_demo(args)
        return _run(COMMANDS[args.command](args))
    except DatabaseUnavailable as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_UNAVAILABLE
    except SchemaNotMigrated as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_NOT_MIGRATED
    except TenureError as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

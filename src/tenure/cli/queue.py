"""Schema and queue commands: migrate, enqueue, recover (`tenure status` is in health.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tenure.cli._common import EXIT_USAGE, emit_json, err, out, positive_int, resolve
from tenure.client import Client
from tenure.db.connect import connect, open_pool
from tenure.db.migrate import migrate, require_current_schema
from tenure.db.queries import Queries
from tenure.runtime.options import WorkerOptions
from tenure.runtime.recovery import Recovery
from tenure.runtime.services import WorkerServices


async def cmd_migrate(args: argparse.Namespace) -> int:
    dsn = resolve(args).dsn
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
    client = Client(resolve(args).dsn, schema=args.schema)
    spec = client.builder.spec(
        args.task,
        payload,
        queue=args.queue,
        priority=args.priority,
        delay=args.delay,
        max_attempts=args.max_attempts,
        ordering_key=args.ordering_key,
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


async def cmd_recover(args: argparse.Namespace) -> int:
    dsn = resolve(args).dsn
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
        "to_scheduled": sum(1 for r in recovered if r.state.value == "scheduled"),
        "to_pending": sum(1 for r in recovered if r.state.value == "pending"),
        "to_dead": sum(1 for r in recovered if r.state.value == "dead"),
    }
    if args.json:
        emit_json(summary)
    else:
        out.print(summary)
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("migrate", parents=[common], help="create or upgrade the Tenure schema")
    p.set_defaults(handler=cmd_migrate)

    p = sub.add_parser("enqueue", parents=[common], help="enqueue a job")
    p.add_argument("task")
    p.add_argument("--payload", default="{}", help="JSON object of keyword arguments")
    p.add_argument("--queue", default=None)
    p.add_argument("--priority", type=int, default=None)
    p.add_argument("--delay", type=float, default=None, help="seconds before the job may run")
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--ordering-key", default=None, help="run one at a time, in order, with this key's jobs")
    p.add_argument("--count", type=positive_int, default=1, help="enqueue this many copies through COPY")
    p.set_defaults(handler=cmd_enqueue)

    p = sub.add_parser("recover", parents=[common], help="recover expired leases now")
    p.set_defaults(handler=cmd_recover)

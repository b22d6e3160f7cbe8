"""Schema and queue commands: migrate, enqueue, recover (`tenure status` is in health.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tenure.app import Tenure
from tenure.db.connect import connect
from tenure.db.migrate import migrate, require_current_schema
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.model.errors import ConfigurationError, UnknownTask
from tenure.ops.cli._common import EXIT_USAGE, emit_json, err, out, positive_int, resolve
from tenure.ops.cli.apps import connect_app, load_app, module_of_task
from tenure.ops.views.durations import human
from tenure.producer.builder import known_tasks_hint
from tenure.producer.client import Client
from tenure.tasks import AnyTask
from tenure.worker.options import WorkerOptions
from tenure.worker.recovery import Recovery
from tenure.worker.services import WorkerServices


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


def read_payload(given: str) -> str:
    """--payload's text: JSON as given, `@FILE` for a file's contents, `-` for standard input
    (large payloads do not fit on a command line)."""
    if given == "-":
        return sys.stdin.read()
    if given.startswith("@"):
        path = Path(given[1:])
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"--payload {given}: cannot read {path} ({exc.__class__.__name__}: {exc}); give a "
                "readable UTF-8 JSON file, or the JSON itself"
            ) from None
    return given


async def cmd_enqueue(args: argparse.Namespace) -> int:
    text = read_payload(args.payload)
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        where = "" if args.payload == text else f" (read from {args.payload})"
        err.print(
            f"error: --payload{where} is not valid JSON ({exc}); give an object like '{{\"n\": 1}}'",
            markup=False,
        )
        return EXIT_USAGE
    client, task = _producer_for(args)
    spec = client.builder.spec(
        task,
        payload,
        queue=args.queue,
        priority=args.priority,
        delay=args.delay,
        max_attempts=args.max_attempts,
        ordering_key=args.ordering_key,
        unique=args.unique_key,
        idempotency_key=args.idempotency_key,
    )
    async with client:
        if args.count > 1:
            n = await client.enqueue_copy([spec] * args.count)
            result: dict[str, Any] = {"enqueued": n}
        else:
            [job] = await client.enqueue_many([spec])
            result = {
                "id": job.id,
                "idempotency_key": None if job.idempotency_key is None else str(job.idempotency_key),
                "existing": job.existing,
                "unique_key": job.unique_key,
            }
    result.update(task=spec.task, queue=spec.queue, max_attempts=spec.max_attempts)
    if args.json:
        emit_json(result)
    elif result.get("existing"):
        why = (
            f"holds the unique key {result['unique_key']}"
            if result["unique_key"]
            else "has this idempotency key"
        )
        out.print(f"job {result['id']} already {why}: it is returned, and nothing was enqueued", markup=False)
    elif "enqueued" in result:
        out.print(
            f"enqueued {result['enqueued']} job(s) of task {result['task']} to queue {result['queue']} "
            f"(COPY), each with up to {result['max_attempts']} attempts",
            markup=False,
            highlight=False,
        )
    else:
        due = f", due in {human(args.delay)}" if args.delay else ""
        out.print(
            f"enqueued job {result['id']}: task {result['task']} to queue {result['queue']}{due}, "
            f"up to {result['max_attempts']} attempts\n  idempotency key {result['idempotency_key']}"
            + (f"\n  unique key {result['unique_key']}" if result["unique_key"] else "")
            + f"\n  follow it: tenure show {result['id']}",
            markup=False,
            highlight=False,
        )
    return 0


def _producer_for(args: argparse.Namespace) -> tuple[Client, str | AnyTask]:
    """A client for TASK's app (loaded as `tenure worker` loads it) and the task it registers;
    with --by-name, a bare client and the name alone."""
    if args.by_name:
        if args.app:
            raise ConfigurationError("--by-name enqueues without loading an app: drop --app, or --by-name")
        if args.queue is None:
            raise ConfigurationError(
                f"--by-name needs --queue: name the queue a worker that has task {args.task!r} serves"
            )
        return Client(resolve(args).dsn, schema=args.schema), args.task
    app = load_app(args.app or module_of_task(args.task))
    task = app.registry.get(args.task)
    if task is None:
        where = args.app or module_of_task(args.task)
        raise UnknownTask(
            f"task {args.task!r} is not registered in the app of {where!r} "
            f"({_known(app, args.task)}); give the registered name, or --app MODULE[:APP] for the "
            "app that has it"
        )
    client = Client(
        connect_app(app, args),
        schema=app.schema,
        registry=app.registry,
        max_payload_bytes=app.max_payload_bytes,
        credential_policy=app.credential_policy,
    )
    return client, task


def _known(app: Tenure, name: str) -> str:
    return known_tasks_hint(app.registry, name) if len(app.registry) else "it registers no tasks"


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

    p = sub.add_parser(
        "enqueue",
        parents=[common],
        help="enqueue a job for a task of an app, with that task's policy",
        description=(
            "Loads the app that registers TASK, as `tenure worker` does, and enqueues with the task's "
            "queue, priority and max_attempts unless the options below say otherwise. The app is "
            "found in the module named by TASK up to its last dot (shop.tasks.send_receipt -> "
            "shop.tasks), or given with --app. An unknown task, or a payload that does not fit the "
            "handler, exits 2 and writes nothing."
        ),
    )
    p.add_argument("task", help="the registered task name, e.g. shop.tasks.send_receipt")
    p.add_argument(
        "--app",
        default=None,
        metavar="MODULE[:APP]",
        help="the app that registers TASK, when its module is not TASK's name up to the last dot",
    )
    p.add_argument(
        "--by-name",
        action="store_true",
        help="enqueue TASK by name without loading an app (needs --queue; no policy, no payload check)",
    )
    p.add_argument(
        "--payload",
        default="{}",
        help="JSON object of keyword arguments; @FILE reads it from a file, - from standard input "
        "(at most 1 MiB by default: docs/concepts.md#limits)",
    )
    p.add_argument("--queue", default=None, help="default: the task's queue")
    p.add_argument("--priority", type=int, default=None, help="default: the task's priority")
    p.add_argument("--delay", type=float, default=None, help="seconds before the job may run")
    p.add_argument("--max-attempts", type=int, default=None, help="default: the task's max_attempts")
    p.add_argument("--ordering-key", default=None, help="run one at a time, in order, with this key's jobs")
    p.add_argument("--count", type=positive_int, default=1, help="enqueue this many copies through COPY")
    p.add_argument(
        "--unique-key",
        default=None,
        help="while a job of this task holds this key (queued or running), return it instead of enqueueing",
    )
    p.add_argument(
        "--idempotency-key",
        default=None,
        help="your key for this enqueue: run again (after a timeout, say), it returns the first job",
    )
    p.set_defaults(handler=cmd_enqueue)

    p = sub.add_parser("recover", parents=[common], help="recover expired leases now")
    p.set_defaults(handler=cmd_recover)

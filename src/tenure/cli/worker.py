"""`tenure worker`: run a worker process for the tasks of an app."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from tenure.app import Tenure
from tenure.cli._common import emit_json, positive_int, resolve
from tenure.cli.ops import add_worker_options, prepare_worker
from tenure.errors import TenureError
from tenure.runtime.options import WorkerOptions


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


def oldest_every(text: str) -> int | None:
    """`--oldest-every N` (one claimed job in N is the queue's oldest due job) or `off`."""
    return None if text.strip().lower() == "off" else positive_int(text)


def parse_queues(spec: str | None) -> tuple[list[str] | None, dict[str, int] | None]:
    """`a,b` or `a=3,b=1` (weights, O3) -> queue names and their weights."""
    if not spec:
        return None, None
    queues: list[str] = []
    weights: dict[str, int] = {}
    for item in spec.split(","):
        name, sep, weight = item.strip().partition("=")
        queues.append(name)
        if sep:
            if not weight.isdigit() or int(weight) < 1:
                raise TenureError(
                    f"--queues: weight {weight!r} of {name!r} must be an integer >= 1, as in a=3,b=1"
                )
            weights[name] = int(weight)
    return queues, weights or None


async def cmd_worker(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    app.dsn = args.dsn or app.dsn
    app.dsn = resolve(argparse.Namespace(dsn=app.dsn, json=False)).dsn
    if args.schema_given:
        app.schema = args.schema
    queues, weights = parse_queues(args.queues)
    options = WorkerOptions(
        queues=queues,
        queue_weights=weights,
        concurrency=args.concurrency,
        lease_seconds=args.lease,
        max_runtime_seconds=args.max_runtime,
        poll_interval=args.poll_interval,
        shutdown_grace=args.grace,
        listen=not args.no_listen,
        oldest_every=args.oldest_every,
        **({"worker_id": args.worker_id} if args.worker_id else {}),
    )
    worker = app.worker(options)
    metrics = prepare_worker(worker, args, app.dsn)  # logs, retention, metrics port
    try:
        stats = await worker.run(handle_signals=True)
    finally:
        if metrics is not None:
            metrics.close()
    if args.json:
        emit_json(stats.as_dict())
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("worker", parents=[common], help="run a worker for the tasks of an app")
    p.add_argument("app", help="module (or module:attribute) defining a tenure.Tenure app")
    p.add_argument(
        "--queues",
        default=None,
        help="comma-separated queues, optionally weighted: a=3,b=1 (default: the tasks' queues)",
    )
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--lease", type=float, default=30.0, help="lease seconds (renewed on progress)")
    p.add_argument("--max-runtime", type=float, default=3600.0, help="hard limit per attempt, seconds")
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--grace", type=float, default=10.0, help="seconds running jobs get at shutdown")
    p.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    p.add_argument(
        "--oldest-every",
        type=oldest_every,
        default=10,
        help="one claimed job in N is the queue's oldest due job, whatever its priority (the "
        "starvation bound, docs/ordering.md); 'off' claims by priority only (default: 10)",
    )
    p.add_argument("--worker-id", default=None)
    add_worker_options(p)
    p.set_defaults(handler=cmd_worker)

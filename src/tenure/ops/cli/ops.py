"""Operations commands: `tenure prune` (retention) and `tenure metrics serve|dump`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from tenure.db.connect import connect
from tenure.db.migrate import require_current_schema
from tenure.db.pool import open_pool
from tenure.model.errors import ConfigurationError, TenureError
from tenure.ops.cli._common import emit_json, log_level, out, resolve
from tenure.ops.views.durations import duration, queue_duration
from tenure.telemetry.logging_context import configure_logging
from tenure.worker.maintenance import RetentionPolicy, prune

METRICS_MISSING = "metrics need prometheus-client: pip install 'tenure[metrics]'"


def retention_from_args(args: argparse.Namespace) -> RetentionPolicy:
    return RetentionPolicy(
        finished_seconds=args.keep_finished,
        per_queue=dict(args.keep_queue or []),
        audit_seconds=args.keep_audit,
        dead_seconds=args.keep_dead,
    )


def add_retention_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-finished", type=duration, default=7 * 86400.0, help="succeeded/cancelled (7d)")
    p.add_argument(
        "--keep-queue", type=queue_duration, action="append", help="QUEUE=DURATION, overrides --keep-finished"
    )
    p.add_argument(
        "--keep-audit", type=duration, default=30 * 86400.0, help="audit rows of finished jobs (30d)"
    )
    p.add_argument(
        "--keep-dead", type=duration, default=None, help="purge dead jobs older than this (default: never)"
    )


async def cmd_prune(args: argparse.Namespace) -> int:
    try:
        policy = retention_from_args(args)
    except ConfigurationError as exc:
        raise TenureError(str(exc)) from None
    dsn = resolve(args).dsn
    pool = await open_pool(dsn, min_size=1, max_size=2, name="tenure-prune")
    try:
        async with pool.connection() as conn:
            await require_current_schema(conn, args.schema)
        report = await prune(pool, args.schema, policy)
    finally:
        await pool.close()
    if args.json:
        emit_json(report.as_dict())
    else:
        counts = report.as_dict()
        said = ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in counts.items())
        out.print(f"pruned: {said}", markup=False)
    return 0


def _collector(args: argparse.Namespace) -> Any:
    try:
        from prometheus_client import CollectorRegistry

        from tenure.ops.metrics import DatabaseCollector
    except ImportError:
        raise TenureError(METRICS_MISSING) from None
    registry = CollectorRegistry()
    collector = DatabaseCollector(
        resolve(args).dsn, args.schema, near_expiry_seconds=args.near_expiry, stale_seconds=args.stale_after
    )
    registry.register(collector)
    return registry, collector


async def cmd_metrics(args: argparse.Namespace) -> int:
    async with await connect(resolve(args).dsn, name="tenure-cli") as conn:
        await require_current_schema(conn, args.schema)
    registry, collector = _collector(args)
    if args.metrics_command == "dump":
        from prometheus_client import generate_latest

        sys.stdout.write(generate_latest(registry).decode())
        collector.close()
        return 0
    from tenure.ops.metrics import serve

    server = serve(registry, args.port, args.host)
    out.print(f"serving database gauges at http://{args.host}:{server.port}/metrics")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        server.close()
        collector.close()
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "prune",
        parents=[common],
        help="delete finished jobs, audit rows and finished workflows past retention",
    )
    add_retention_options(p)
    p.set_defaults(handler=cmd_prune)

    p = sub.add_parser("metrics", help="the database gauges in the Prometheus text format")
    p.set_defaults(handler=cmd_metrics)
    metrics = p.add_subparsers(dest="metrics_command", required=True)
    for name, doc in (("serve", "serve them on an HTTP port"), ("dump", "print them once")):
        m = metrics.add_parser(name, parents=[common], help=doc)
        m.add_argument(
            "--near-expiry", type=duration, default=10.0, help="a lease this close to expiry counts"
        )
        m.add_argument(
            "--stale-after", type=duration, default=60.0, help="a worker silent this long is stale"
        )
        if name == "serve":
            m.add_argument("--port", type=int, default=9464)
            m.add_argument("--host", default="0.0.0.0")


# -- the worker's operations flags (registered by cli/worker.py) ---------------------------------


def add_worker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port (0: any free)"
    )
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="json: one object per line")
    p.add_argument("--no-prune", action="store_true", help="this worker never runs the retention pass")
    add_retention_options(p)


def prepare_worker(worker: Any, args: argparse.Namespace, dsn: str) -> Any:
    """Applies the worker's logging, retention and metrics flags; returns what to close after."""
    configure_logging(level=log_level(args), fmt=args.log_format)
    try:
        worker.retention = None if args.no_prune else retention_from_args(args)
    except ConfigurationError as exc:
        raise TenureError(str(exc)) from None
    if args.metrics_port is None:
        return None
    try:
        from tenure.ops.metrics.worker import attach
    except ImportError:
        raise TenureError(METRICS_MISSING) from None
    metrics = attach(worker, dsn=dsn, port=args.metrics_port, host=args.metrics_host)
    if metrics.server is not None:
        logging.getLogger("tenure.worker").info(
            "metrics at http://%s:%s/metrics", args.metrics_host, metrics.server.port
        )
    return metrics

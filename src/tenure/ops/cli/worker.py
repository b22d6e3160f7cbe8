"""`tenure worker`: run a worker process for the tasks of an app."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from rich.markup import escape

from tenure.db.connect import LISTEN_DSN_ENV, PREPARE_THRESHOLD_ENV, parse_prepare_threshold
from tenure.model.errors import ConfigurationError, TenureError
from tenure.model.outcomes import DEFAULT_MAX_RESULT_BYTES
from tenure.ops.cli._common import emit_json, err, positive_int
from tenure.ops.cli.apps import connect_app, load_app
from tenure.ops.cli.banner import run_announced, stop_summary
from tenure.ops.cli.ops import add_worker_options, prepare_worker
from tenure.worker.event_loop import EVENT_LOOP_ENV, EVENT_LOOPS
from tenure.worker.options import WorkerOptions


def oldest_every(text: str) -> int | None:
    """`--oldest-every N` (one claimed job in N is the queue's oldest due job) or `off`."""
    return None if text.strip().lower() == "off" else positive_int(text)


def vacuum_check_every(text: str) -> float | None:
    """`--vacuum-check-every SECONDS` or `off` (autovacuum alone)."""
    if text.strip().lower() == "off":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds or 'off', got {text!r}")
    return seconds


def parse_queues(spec: str | None) -> tuple[list[str] | None, dict[str, int] | None]:
    """`a,b` or `a=3,b=1` (weights) -> queue names and their weights."""
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


#: Exit code of a worker that stopped because a critical service kept failing.
EXIT_SERVICE_FAILED = 1


async def cmd_worker(args: argparse.Namespace) -> int:
    if args.prepare_threshold is not None:
        try:
            parse_prepare_threshold(args.prepare_threshold)
        except ConfigurationError as exc:
            raise TenureError(f"--prepare-threshold: {exc}") from None
        os.environ[PREPARE_THRESHOLD_ENV] = args.prepare_threshold  # every pool of this process
    app = load_app(args.app)
    dsn = connect_app(app, args)
    queues, weights = parse_queues(args.queues)
    options = WorkerOptions(
        queues=queues,
        queue_weights=weights,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        trickle_gap=args.trickle_gap,
        lease_seconds=args.lease,
        max_runtime_seconds=args.max_runtime,
        poll_interval=args.poll_interval,
        shutdown_grace=args.grace,
        listen=not args.no_listen,
        hand_off=not args.no_hand_off,
        listen_dsn=args.listen_dsn or os.environ.get(LISTEN_DSN_ENV) or None,
        statement_timeout=args.statement_timeout,
        service_failure_limit=args.service_failure_limit,
        oldest_every=args.oldest_every,
        vacuum_check_every=args.vacuum_check_every,
        heartbeat_interval=args.heartbeat_interval,
        max_result_bytes=args.max_result_bytes,
        require_sync_replication=True if args.require_sync_replication else None,
        **({"worker_id": args.worker_id} if args.worker_id else {}),
    )
    worker = app.worker(options)
    metrics = prepare_worker(worker, args, dsn)  # logs, retention, metrics port
    # For people: a JSON log stream stays JSON lines only (its INFO records say the same).
    for_people = not args.json and args.log_format == "text"
    started = time.monotonic()
    try:
        if for_people:
            stats = await run_announced(err, worker, args.app, dsn)
        else:
            stats = await worker.run(handle_signals=True)
    finally:
        if metrics is not None:
            metrics.close()
    if args.json:
        emit_json({**stats.as_dict(), "failure": worker.failure})
    elif for_people:
        stop_summary(err, worker, stats, started)
    code = EXIT_SERVICE_FAILED if worker.failure else 0
    if worker.failure:
        err.print(f"[bold red]worker stopped:[/] {escape(worker.failure)}", highlight=False)
    if worker.stuck_threads:
        # Their threads would hold the interpreter's exit until they return; their jobs keep
        # their leases until those expire, as after a crash.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    return code


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("worker", parents=[common], help="run a worker for the tasks of an app")
    p.add_argument("app", help="module (or module:attribute) defining a tenure.Tenure app")
    p.add_argument(
        "--queues",
        default=None,
        help="comma-separated queues, optionally weighted: a=3,b=1 (default: the tasks' queues)",
    )
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument(
        "--claim-batch",
        type=positive_int,
        default=WorkerOptions.claim_batch,
        help="the most jobs one claim takes, never more than the free slots; with concurrency at "
        f"twice it every claim is full (default: {WorkerOptions.claim_batch})",
    )
    p.add_argument(
        "--trickle-gap",
        type=float,
        default=WorkerOptions.trickle_gap,
        help="seconds a claim that emptied its queue waits before the next one, which takes "
        "together the jobs that arrived meanwhile; 0 claims at every notification "
        f"(default: {WorkerOptions.trickle_gap})",
    )
    p.add_argument("--lease", type=float, default=30.0, help="lease seconds (renewed on progress)")
    p.add_argument("--max-runtime", type=float, default=3600.0, help="hard limit per attempt, seconds")
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--grace", type=float, default=10.0, help="seconds running jobs get at shutdown")
    p.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
    p.add_argument(
        "--no-hand-off",
        action="store_true",
        help="make no offer of an idle slot to lone jobs' enqueues: every job is claimed (docs/hand-off.md)",
    )
    p.add_argument(
        "--listen-dsn",
        default=None,
        help=f"a direct connection for LISTEN when --dsn goes through PgBouncer (or ${LISTEN_DSN_ENV})",
    )
    p.add_argument(
        "--statement-timeout",
        type=float,
        default=None,
        help="seconds any one statement of the worker may take (default: a third of the lease, at most 10)",
    )
    p.add_argument(
        "--service-failure-limit",
        type=float,
        default=120.0,
        help="exit 1 when the claimer, completer, heartbeat or recovery fails this many seconds in a row",
    )
    p.add_argument(
        "--prepare-threshold",
        default=None,
        help="runs before a statement is prepared, or 'none'; behind a pooler that loses prepared "
        f"statements none are prepared anyway (or ${PREPARE_THRESHOLD_ENV})",
    )
    p.add_argument(
        "--oldest-every",
        type=oldest_every,
        default=10,
        help="one claimed job in N is the queue's oldest due job, whatever its priority (the "
        "starvation bound, docs/ordering.md); 'off' claims by priority only (default: 10)",
    )
    p.add_argument(
        "--vacuum-check-every",
        type=vacuum_check_every,
        default=WorkerOptions.vacuum_check_every,
        help="seconds between checks of whether the jobs table is due a vacuum by autovacuum's "
        "trigger for it, which the worker then runs itself; 'off' leaves it to autovacuum "
        f"(default: {WorkerOptions.vacuum_check_every})",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=None,
        help="seconds between heartbeats, which renew leases and find revoked jobs "
        "(default: a third of the lease)",
    )
    p.add_argument(
        "--max-result-bytes",
        type=positive_int,
        default=DEFAULT_MAX_RESULT_BYTES,
        help=f"largest handler result stored, as JSON bytes (default: {DEFAULT_MAX_RESULT_BYTES})",
    )
    p.add_argument(
        "--require-sync-replication",
        action="store_true",
        help="report a completion done only once a synchronous standby has it; without one, "
        "write no completion and claim nothing (default: $TENURE_REQUIRE_SYNC_REPLICATION)",
    )
    p.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=None,
        help=f"the event loop to run on: uvloop, where installed, costs less CPU per job "
        f"(default: ${EVENT_LOOP_ENV}, else asyncio)",
    )
    p.add_argument("--worker-id", default=None)
    add_worker_options(p)
    p.set_defaults(handler=cmd_worker)

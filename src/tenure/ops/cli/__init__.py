"""The `tenure` command. Each command group lives in its own module with a `register` function."""

from __future__ import annotations

import argparse
import inspect
import sys

import psycopg

from tenure.db.connect import DSN_ENV
from tenure.model.errors import DatabaseUnavailable, SchemaNotMigrated, TenureError
from tenure.ops.cli import (
    bench,
    control,
    dashboard,
    dead,
    demo,
    effects,
    embedded,
    health,
    ops,
    ordering,
    queue,
    roles,
    schedules,
    soak,
    waits,
    worker,
    workflows,
)
from tenure.ops.cli._common import (
    EXIT_NOT_MIGRATED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    err,
    log_level,
    logging_options,
    privilege_refused,
)
from tenure.telemetry.logging_context import configure_logging
from tenure.worker.event_loop import run_on

__all__ = ["EXIT_NOT_MIGRATED", "EXIT_UNAVAILABLE", "EXIT_USAGE", "build_parser", "main"]

#: Command groups, in the order `tenure --help` lists them.
COMMAND_MODULES = [
    queue,
    health,
    worker,
    dead,
    control,
    schedules,
    workflows,
    waits,
    ops,
    ordering,
    effects,
    dashboard,
    demo,
    embedded,
    soak,
    roles,
    bench,
]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=None, help=f"PostgreSQL DSN (default ${DSN_ENV}, else embedded)")
    common.add_argument("--schema", default="tenure", help="Tenure schema name (default: tenure)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    logging_options(common, default=argparse.SUPPRESS)  # after the command too: `tenure worker -v`

    parser = argparse.ArgumentParser(prog="tenure", description="A durable PostgreSQL job queue.")
    logging_options(parser, default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(raw)
    args.schema_given = "--schema" in raw or any(a.startswith("--schema=") for a in raw)
    configure_logging(level=log_level(args))
    try:
        result = args.handler(args)
        if inspect.iscoroutine(result):
            # The commands with --event-loop (worker, bench) run on the loop chosen; every other
            # one on asyncio's own.
            result = run_on(args.event_loop if "event_loop" in args else "asyncio", result)
        return int(result)
    except DatabaseUnavailable as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_UNAVAILABLE
    except SchemaNotMigrated as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_NOT_MIGRATED
    except TenureError as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_USAGE
    except psycopg.errors.InsufficientPrivilege as exc:
        # Anywhere in any command: the fix is the same, another role, and a traceback hides it.
        err.print(privilege_refused(args, exc), markup=False)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130

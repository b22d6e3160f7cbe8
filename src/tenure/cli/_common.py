"""What every command shares: consoles, exit codes, JSON output, finding the database."""

from __future__ import annotations

import argparse
import json
import logging
from datetime import datetime
from typing import Any

from rich.console import Console

from tenure.db.connect import DSN_ENV, ResolvedDsn, resolve_dsn

out = Console()
err = Console(stderr=True, soft_wrap=True)

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_MIGRATED = 4


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def emit_json(data: Any) -> None:
    print(json.dumps(data, default=_json_default, indent=2))


def resolve(args: argparse.Namespace) -> ResolvedDsn:
    """The command's database; says so on stderr when it is the embedded server."""
    resolved = resolve_dsn(args.dsn)
    if resolved.embedded and not getattr(args, "json", False):
        err.print(
            f"[dim]using the embedded PostgreSQL in {resolved.data_dir} (set --dsn or {DSN_ENV} "
            "to use your own server)[/dim]"
        )
    return resolved


def positive_int(text: str) -> int:
    """An argparse type for counts that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def as_dict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


LOG_LEVELS = ("debug", "info", "warning", "error")


def logging_options(p: argparse.ArgumentParser, default: Any) -> None:
    # SUPPRESS on the commands: a flag given before the command is not reset by the command's
    # own default.
    p.add_argument(
        "-v",
        "--verbose",
        action="store_const",
        const="info",
        dest="log_level",
        default=default,
        help="log at INFO level",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_const",
        const="error",
        dest="log_level",
        default=default,
        help="log errors only",
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        dest="log_level",
        default=default,
        help="log at this level (default: warning)",
    )


def log_level(args: argparse.Namespace) -> int:
    """The level the command logs at: --log-level, -v (info) or -q (error), else warning."""
    name = getattr(args, "log_level", None) or "warning"
    return int(getattr(logging, name.upper()))

"""What every command shares: consoles, exit codes, JSON output, finding the database."""

from __future__ import annotations

import argparse
import json
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

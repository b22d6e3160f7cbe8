"""What every command shares: consoles, exit codes, JSON output, finding the database."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from rich.console import Console

from tenure.db.connect import DSN_ENV, ResolvedDsn, connect, resolve_dsn
from tenure.db.migrate import require_current_schema
from tenure.producer.client import Client

#: How wide tables are laid out when there is no terminal to measure (output piped to a file,
#: `less` or grep): rich's 80 columns would cut their cells. A terminal's own width is used as it
#: changes, and COLUMNS, when set, wins over both.
PIPED_WIDTH = 200


def _console(**options: Any) -> Console:
    console = Console(**options)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPED_WIDTH
    return console


out = _console()
err = _console(stderr=True, soft_wrap=True)

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_MIGRATED = 4

#: The role a command runs as, where it is not the admin role (docs/security.md): operators' acts
#: and reports are the admin's.
ROLE_OF_COMMAND = {"worker": "the worker role", "enqueue": "the producer role (or the admin role)"}


def privilege_refused(args: argparse.Namespace, exc: psycopg.errors.InsufficientPrivilege) -> str:
    """One line for a command the database refused for want of a privilege: what was refused,
    and the role to run it as."""
    command = getattr(args, "command", None) or ""
    words = ["tenure", command, getattr(args, f"{command}_command", None) or ""]
    said = (exc.diag.message_primary or "permission denied").rstrip(".")
    return (
        f"error: the database refused `{' '.join(w for w in words if w)}` to this role ({said}): run "
        f"it as {ROLE_OF_COMMAND.get(command, 'the admin role')}; `tenure roles` prints each role's "
        "GRANTs (docs/security.md)"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if is_dataclass(value) and not isinstance(value, type):
        return as_dict(value)
    return str(value)


def emit_json(data: Any) -> None:
    """`data` as indented JSON on stdout: a row read from the database as an object of its
    columns in their order, a time in ISO 8601."""
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


@contextlib.asynccontextmanager
async def connected(args: argparse.Namespace) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection to the command's database, once its schema is known to be current."""
    async with await connect(resolve(args).dsn, name="tenure-cli") as conn:
        await require_current_schema(conn, args.schema)
        yield conn


@contextlib.asynccontextmanager
async def client_for(args: argparse.Namespace) -> AsyncIterator[Client]:
    """A client on the command's database, once its schema is known to be current."""
    async with Client(resolve(args).dsn, schema=args.schema) as client:
        async with (await client.pool()).connection() as conn:
            await require_current_schema(conn, args.schema)
        yield client


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
    """A row (a dataclass) as a dict of its fields, in their order; not deep: a value the row
    holds stays as it is."""
    return {field.name: getattr(obj, field.name) for field in fields(obj)}


LOG_LEVELS = ("debug", "info", "warning", "error")


#: The flags that set the level a command logs at, each as (flags, level, help).
LOG_FLAGS = (
    (("-v", "--verbose"), "info", "log at INFO level"),
    (("-q", "--quiet"), "error", "log errors only"),
)


def logging_options(p: argparse.ArgumentParser, default: Any) -> None:
    # SUPPRESS on the commands: a flag given before the command is not reset by the command's
    # own default.
    for flags, level, text in LOG_FLAGS:
        p.add_argument(
            *flags, action="store_const", const=level, dest="log_level", default=default, help=text
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

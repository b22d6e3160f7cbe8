"""`tenure embedded dsn`: the embedded server's DSN, for a project (Django, FastAPI) to use the
same server the `tenure` commands do when no --dsn or $TENURE_DSN is given."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from tenure.db.databases import ensure_database
from tenure.db.embedded import DATA_DIR_ENV, default_data_dir, start_embedded
from tenure.model.errors import ConfigurationError, TenureError
from tenure.ops.cli._common import emit_json, err, logging_options


async def cmd_embedded_dsn(args: argparse.Namespace) -> int:
    data_dir = default_data_dir()
    dsn = start_embedded(data_dir)
    created = False
    if args.database:
        try:
            dsn, created = await ensure_database(dsn, args.database)
        except ConfigurationError as exc:
            raise TenureError(str(exc)) from None
    if args.json:
        emit_json({"dsn": dsn, "data_dir": str(data_dir), "database": args.database, "created": created})
        return 0
    print(dsn)
    if created:
        err.print(
            f"[dim]created database {escape(args.database)} on the embedded PostgreSQL in "
            f"{escape(str(data_dir))}[/dim]",
            highlight=False,
        )
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("embedded", help="the embedded PostgreSQL that commands use without --dsn")
    commands = p.add_subparsers(dest="embedded_command", required=True)
    # Not the common options: --dsn and --schema would mean nothing here.
    dsn = commands.add_parser(
        "dsn",
        help=f"print the embedded server's DSN (started if needed; in ${DATA_DIR_ENV}, else "
        "~/.local/share/tenure/pgdata)",
    )
    dsn.add_argument(
        "--database",
        default=None,
        help="the DSN of this database on it instead, created if it does not exist (for a project's "
        "own tables and Tenure's, as in --database shop)",
    )
    dsn.add_argument("--json", action="store_true", help="machine-readable output")
    logging_options(dsn, default=argparse.SUPPRESS)
    dsn.set_defaults(handler=cmd_embedded_dsn)

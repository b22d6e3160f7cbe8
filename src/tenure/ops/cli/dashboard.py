"""`tenure dashboard`: the web dashboard, served with uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
from typing import Any

from tenure.db.connect import connect, describe_dsn
from tenure.db.migrate import require_current_schema, schema_version
from tenure.model.errors import DatabaseUnavailable
from tenure.ops.cli._common import EXIT_USAGE, err, resolve
from tenure.ops.demo.database import check_database_name, with_database

TOKEN_ENV = "TENURE_DASHBOARD_TOKEN"
DEFAULT_PORT = 8787


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: The database `tenure demo` creates on the same server.
DEMO_DATABASE = "tenure_demo"


async def _has_schema(dsn: str, schema: str) -> bool:
    try:
        async with await connect(dsn, name="tenure-dashboard") as conn:
            return await schema_version(conn, schema) is not None
    except DatabaseUnavailable:
        return False


async def _choose(args: argparse.Namespace) -> str:
    """The database to show: the demo's with --demo; on the embedded default that holds no jobs
    yet but a demo run, the demo's (a newcomer's `tenure demo` then `tenure dashboard`); else the
    one given. Checked before serving, so a wrong one fails here with the fix, not in the page."""
    resolved = resolve(args)
    dsn = resolved.dsn
    demo = with_database(resolved.dsn, DEMO_DATABASE)
    if args.demo:
        dsn = with_database(resolved.dsn, check_database_name(args.demo))
    elif (
        resolved.embedded and not await _has_schema(dsn, args.schema) and await _has_schema(demo, args.schema)
    ):
        err.print(
            f"the embedded PostgreSQL holds no Tenure schema {args.schema!r} yet, but `tenure demo` left "
            f"its run in database {DEMO_DATABASE!r}: showing that one",
            markup=False,
        )
        dsn = demo
    async with await connect(dsn, name="tenure-dashboard") as conn:
        await require_current_schema(conn, args.schema)
    return dsn


def cmd_dashboard(args: argparse.Namespace) -> int:
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(args.host):
        err.print(
            f"error: refusing to serve the dashboard on {args.host} without authentication: anyone who "
            f"reaches that address could act on your jobs. Set {TOKEN_ENV} to a long random token, or "
            "bind to 127.0.0.1",
            markup=False,
        )
        return EXIT_USAGE
    try:
        import uvicorn  # only this command needs the server

        from tenure.ops.dashboard import create_app, token_auth
    except ImportError as exc:
        err.print(
            f"error: the dashboard needs the 'dashboard' extra ({exc.name} is not installed): "
            "pip install 'tenure[dashboard]'",
            markup=False,
        )
        return EXIT_USAGE

    dsn = asyncio.run(_choose(args))
    app = create_app(
        dsn=dsn,
        schema=args.schema,
        read_only=args.read_only,
        auth=None if token is None else token_auth(token),
    )
    shown = f"[{args.host}]" if ":" in args.host else args.host
    err.print(
        f"Tenure dashboard of {describe_dsn(dsn)} on http://{shown}:{args.port}/"
        + (" (read-only)" if args.read_only else "")
        + (f" (token from {TOKEN_ENV})" if token else ""),
        markup=False,
    )
    # No access log: its lines would carry the jobs list's filters, payload values among them.
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level="warning")
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("dashboard", parents=[common], help="the web dashboard (127.0.0.1:8787 by default)")
    p.add_argument(
        "--host", default="127.0.0.1", help=f"address to bind (other than loopback needs {TOKEN_ENV})"
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to bind (default {DEFAULT_PORT})")
    p.add_argument("--read-only", action="store_true", help="show everything, offer and accept no action")
    p.add_argument(
        "--demo",
        nargs="?",
        const=DEMO_DATABASE,
        default=None,
        metavar="DATABASE",
        help=f"show the run `tenure demo` left on this server (database {DEMO_DATABASE!r}, or the one named)",
    )
    p.set_defaults(handler=cmd_dashboard)

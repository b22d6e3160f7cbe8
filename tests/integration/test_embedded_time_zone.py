"""The embedded server keeps time in UTC whatever the host's zone, so that every session reads
timestamps without a zone conversion; a zone its operator set with ALTER SYSTEM is kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tenure.db.embedded import start_embedded, stop_embedded


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "pgdata"
    yield directory
    stop_embedded(directory)


def time_zone(uri: str) -> str:
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute("SHOW timezone").fetchone()
    assert row is not None
    return str(row[0])


def test_a_new_embedded_server_keeps_time_in_utc_and_an_operators_own_zone_is_kept(
    data_dir: Path,
) -> None:
    """A fresh data directory's server reports UTC to every new session; once its operator sets a
    zone of their own, the next start (every command starts the server, or reuses it) leaves
    that zone alone."""
    uri = start_embedded(data_dir)
    assert time_zone(uri) == "UTC"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET timezone = 'Europe/Berlin'")
        conn.execute("SELECT pg_reload_conf()")
    uri = start_embedded(data_dir)
    assert time_zone(uri) == "Europe/Berlin"

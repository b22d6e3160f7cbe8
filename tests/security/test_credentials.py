"""No credential leaks: a DSN's password never shows in errors, status output or worker logs."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from tenure.model.errors import TenureError
from tenure.ops.cli import main
from tenure.producer.client import Client

PASSWORD = "Pw-" + uuid.uuid4().hex  # unique, so a hit can only be a leak


def with_password(dsn: str, user: str, **changes: Any) -> str:
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params.update(user=user, password=PASSWORD, **changes)
    return conninfo.make_conninfo(**params)


@pytest.fixture
def login_role(dsn: str) -> Any:
    """A LOGIN role with a password (the local servers trust it, so the password is only carried)."""
    name = f"tenure_cred_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE \"{name}\" LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP ROLE "{name}"')


def test_unreachable_server_error_hides_the_password(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """`tenure status` against a closed port fails with a message that names the host, not the password."""
    caplog.set_level(logging.DEBUG)
    dsn = f"postgresql://someone:{PASSWORD}@127.0.0.1:1/nowhere"
    assert main(["status", "--dsn", dsn]) != 0
    captured = capsys.readouterr()
    assert "127.0.0.1" in captured.err + captured.out
    assert PASSWORD not in captured.out + captured.err + caplog.text


async def test_client_errors_hide_the_password(dsn: str, login_role: str) -> None:
    """A connection error raised to library callers carries no password, in message or cause."""
    bad = with_password(dsn, login_role, dbname="tenure_no_such_db")
    with pytest.raises(TenureError) as caught:
        async with Client(bad) as client:
            await client.enqueue("x", {})
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    assert all(PASSWORD not in repr(e) and PASSWORD not in str(e) for e in chain if e is not None)


def test_status_and_worker_logs_hide_the_password(
    dsn: str, login_role: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """With a password in the DSN, `tenure status` output and a verbose worker's logs never show it."""
    caplog.set_level(logging.DEBUG)
    secret_dsn = with_password(dsn, login_role)
    assert main(["status", "--dsn", secret_dsn]) == 0
    assert main(["enqueue", "--dsn", secret_dsn, "cred.task", "--by-name", "--queue", "cred"]) == 0
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err + caplog.text

    env = {**os.environ, "TENURE_DSN": secret_dsn}
    argv = [sys.executable, "-m", "tenure.ops.cli", "-v", "worker", "tests.apps.boundary_app", "--lease", "2"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert "worker" in (out + err).lower()
    assert PASSWORD not in out + err

"""`tenure dashboard`: refuses an open bind without a token, and serves the app with uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tenure.ops.cli import main
from tenure.ops.demo.database import drop_database, with_database

SRC = str(Path(__file__).resolve().parents[2] / "src")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_binding_beyond_loopback_without_a_token_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.0.0.0 with no TENURE_DASHBOARD_TOKEN is refused with exit 2 and a message naming the variable."""
    monkeypatch.delenv("TENURE_DASHBOARD_TOKEN", raising=False)
    assert main(["dashboard", "--host", "0.0.0.0", "--dsn", "postgresql://nobody@127.0.0.1:1/x"]) == 2
    assert "TENURE_DASHBOARD_TOKEN" in capsys.readouterr().err


@contextlib.contextmanager
def serve(dsn: str, port: int, token: str | None, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DASHBOARD_TOKEN"}
    env["PYTHONPATH"] = SRC
    if token:
        env["TENURE_DASHBOARD_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "tenure.ops.cli", "dashboard", "--dsn", dsn, "--port", str(port), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer in 20s")


@pytest.mark.slow
def test_the_command_serves_the_dashboard_behind_its_token(dsn: str) -> None:
    """With a token set, the served overview answers 401 without it and 200 with it, read-only."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with serve(dsn, port, "t0ken-for-test", "--read-only") as proc:
        wait_up(url, proc)
        assert httpx.get(url).status_code == 401
        page = httpx.get(url, headers={"Authorization": "Bearer t0ken-for-test"})
        assert page.status_code == 200 and "read-only" in page.text


def test_a_database_without_the_schema_exits_4_naming_the_migration(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pointed at a schema that was never migrated, the command fails before serving with the CLI's
    not-migrated exit code, naming the fix."""
    assert main(["dashboard", "--dsn", dsn, "--schema", "nothing_here", "--port", str(free_port())]) == 4
    assert "tenure migrate --schema nothing_here" in capsys.readouterr().err


@pytest.mark.slow
def test_after_tenure_demo_the_dashboard_shows_its_crashes_and_expired_leases(server_dsn: str) -> None:
    """`tenure demo` (a worker SIGKILLed, one SIGSTOPped) and then `tenure dashboard --demo`: the
    overview counts the run's lease expiries, and a recovered job's page shows the expiry."""
    database = f"tenure_demo_d_{uuid.uuid4().hex[:10]}"
    argv = ["demo", "--dsn", server_dsn, "--database", database, "--transfers", "300", "--accounts", "20"]
    env = {**os.environ, "PYTHONPATH": SRC}
    try:
        demo = subprocess.run(
            [sys.executable, "-m", "tenure.ops.cli", *argv, "--lease", "1", "--concurrency", "4"],
            capture_output=True,
            text=True,
            timeout=150,
            env=env,
        )
        assert demo.returncode == 0, demo.stderr[-2000:]
        assert f"tenure dashboard --dsn ... --demo {database}" in " ".join(demo.stdout.split())
        port = free_port()
        with serve(server_dsn, port, None, "--demo", database) as proc:
            wait_up(f"http://127.0.0.1:{port}/", proc)
            overview = httpx.get(f"http://127.0.0.1:{port}/").text
            expiries = re.search(r"(\d+) lease expiries", overview)
            assert expiries and int(expiries.group(1)) >= 1, overview[:3000]
            finished = re.search(r"(\d+) succeeded", overview)
            assert 'data-queue="bank"' in overview and finished and int(finished.group(1)) >= 250
            with psycopg.connect(with_database(server_dsn, database)) as conn:
                row = conn.execute(
                    "SELECT job_id FROM tenure.job_events WHERE event = 'lease_expired' LIMIT 1"
                ).fetchone()
            assert row is not None
            job = httpx.get(f"http://127.0.0.1:{port}/jobs/{row[0]}").text
            assert "lease expired" in job
    finally:
        asyncio.run(drop_database(server_dsn, database))

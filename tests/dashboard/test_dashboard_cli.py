"""`tenure dashboard`: refuses an open bind without a token, and serves the app with uvicorn."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tenure.cli import main

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
def serve(dsn: str, port: int, token: str | None) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DASHBOARD_TOKEN"}
    env["PYTHONPATH"] = SRC
    if token:
        env["TENURE_DASHBOARD_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "dashboard", "--dsn", dsn, "--port", str(port), "--read-only"],
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
    with serve(dsn, port, token="t0ken-for-test") as proc:
        wait_up(url, proc)
        assert httpx.get(url).status_code == 401
        page = httpx.get(url, headers={"Authorization": "Bearer t0ken-for-test"})
        assert page.status_code == 200 and "read-only" in page.text

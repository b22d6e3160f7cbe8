"""`tenure worker --metrics-port --log-format json` as a real process: it serves metrics while
it runs, logs JSON, registers itself while alive and leaves the registry at a clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _ops import sql

TESTS_DIR = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None


@pytest.mark.crash
def test_worker_process_serves_metrics_logs_json_and_registers_itself(dsn: str, tmp_path: Path) -> None:
    """While it runs the process answers /metrics with runtime and database metrics and is in the
    worker registry; after SIGTERM it has left the registry, and its log lines are JSON."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
    log_path = tmp_path / "worker.log"
    cmd = [sys.executable, "-m", "tenure.ops.cli", "-v", "worker", "apps.ops_app", "--dsn", dsn,
           "--worker-id", "ops-proc-1", "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
           "--log-format", "json", "--poll-interval", "0.1"]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=str(TESTS_DIR))
    try:
        sql(
            dsn,
            "INSERT INTO tenure.jobs (queue, task) SELECT 'ops', 'ops.noop' FROM generate_series(1, 5)",
        )
        wait_for(
            lambda: sql(dsn, "SELECT count(*) FROM tenure.jobs WHERE state = 'succeeded'") == [(5,)],
            "the worker process to finish 5 jobs",
        )
        text = wait_for(lambda: scrape(port), "the metrics endpoint")
        assert 'tenure_jobs_finished_total{outcome="succeeded",queue="ops"} 5.0' in text
        assert "tenure_db_up 1.0" in text and "tenure_worker_concurrency 10.0" in text
        wait_for(
            lambda: sql(dsn, "SELECT id FROM tenure.workers") == [("ops-proc-1",)],
            "the worker's registry row",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert sql(dsn, "SELECT id FROM tenure.workers") == []
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert any("started" in line["msg"] and line["logger"] == "tenure.worker" for line in lines)


@pytest.mark.crash
def test_a_worker_chosen_onto_uvloop_runs_its_jobs_there_and_a_bad_choice_is_refused(
    dsn: str, tmp_path: Path
) -> None:
    """TENURE_EVENT_LOOP=uvloop runs the worker on uvloop (its start line says so) and it finishes
    its jobs and stops cleanly on SIGTERM; an unknown loop exits 2 before connecting, naming the
    choices."""
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "tenure.ops.cli", "-v", "worker", "apps.ops_app", "--dsn", dsn,
           "--log-format", "json", "--poll-interval", "0.1"]  # fmt: skip
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env | {"TENURE_EVENT_LOOP": "uvloop"},
            cwd=str(TESTS_DIR),
        )
    try:
        sql(dsn, "INSERT INTO tenure.jobs (queue, task) SELECT 'ops', 'ops.noop' FROM generate_series(1, 20)")
        wait_for(
            lambda: sql(dsn, "SELECT count(*) FROM tenure.jobs WHERE state = 'succeeded'") == [(20,)],
            "the worker on uvloop to finish 20 jobs",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert any("started" in line["msg"] and "event loop=uvloop" in line["msg"] for line in lines)
    refused = subprocess.run(
        [*cmd, "--event-loop", "trio"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(TESTS_DIR),
        timeout=60,
    )
    assert refused.returncode == 2 and "invalid choice: 'trio'" in refused.stderr
    from_env = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=env | {"TENURE_EVENT_LOOP": "trio"},
        cwd=str(TESTS_DIR),
        timeout=60,
    )
    assert from_env.returncode != 0
    assert "$TENURE_EVENT_LOOP 'trio' is not an event loop Tenure runs on: give one of asyncio, uvloop" in (
        from_env.stderr
    )


@pytest.mark.crash
def test_standalone_exporter_serves_the_cluster_gauges_until_sigterm(dsn: str) -> None:
    """`tenure metrics serve` answers /metrics with every queue's database gauges; SIGTERM exits 0."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    sql(
        dsn,
        "INSERT INTO tenure.jobs (queue, task, available_at) VALUES ('late', 't', now() - interval '1 hour')",
    )
    cmd = [sys.executable, "-m", "tenure.ops.cli", "metrics", "serve", "--dsn", dsn, "--port", str(port),
           "--host", "127.0.0.1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        text = wait_for(lambda: scrape(port), "the exporter's endpoint")
        assert "tenure_db_up 1.0" in text
        [age] = [
            line
            for line in text.splitlines()
            if line.startswith('tenure_oldest_claimable_age_seconds{queue="late"}')
        ]
        assert float(age.split()[-1]) >= 3600
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0

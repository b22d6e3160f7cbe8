"""The statement-cost tool drains with Tenure's own statements and the raw loop's on one
connection and accounts for the server's CPU and the index tuples each scan read. Never timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]


def test_statement_cost_reports_both_drains_and_no_scan_wades_through_the_expiry_index(
    server_dsn: str,
) -> None:
    """Both drains finish every job and report server CPU per job; neither Tenure's completion
    nor the raw loop's reads a single entry of jobs_running_expiry_idx, whose dead entries a
    drain piles up (a plan that reached the rows through it read about 100 a job)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    argv = [sys.executable, "-m", "tenure.lab.bench.statement_cost", "--dsn", server_dsn]
    done = subprocess.run(
        [*argv, "--jobs", "3000", "--rounds", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for name in ("tenure", "raw"):
        drained = result[name]
        assert drained["runs"][0]["jobs"] == 3000
        assert drained["server_cpu_us_per_job"] > 0 and drained["client_cpu_us_per_job"] > 0
        assert "jobs_running_expiry_idx" not in drained["index_tuples_read_per_job"], drained
        assert drained["index_tuples_read_per_job"]["jobs_pkey"] > 0

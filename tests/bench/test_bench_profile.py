"""The worker profiler runs a real worker and accounts for its CPU per job. Never timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]


def test_profile_reports_cpu_per_job_and_the_top_functions(server_dsn: str) -> None:
    """`python -m tenure.lab.bench.profile --tool cprofile` drains with one worker process, reports its
    CPU per job, and ranks functions of Tenure's runtime among the top by cumulative time."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    argv = [sys.executable, "-m", "tenure.lab.bench.profile", "--dsn", server_dsn, "--jobs", "400"]
    done = subprocess.run(
        [*argv, "--tool", "cprofile", "--top", "10", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["bare"]["worker_cpu_us_per_job"] > 0
    assert result["profiled"]["profile_total"] > 0
    assert len(result["top_own"]) == len(result["top_cumulative"]) == 10
    assert any("tenure/worker/" in entry["function"] for entry in result["top_cumulative"])
    assert all(0 < entry["share"] <= 1 for entry in result["top_cumulative"])

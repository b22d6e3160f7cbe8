"""`tenure soak` at CI scale: real workers, its own PostgreSQL, every fault of the schedule."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.crash
def test_soak_survives_every_fault_with_nothing_lost_or_doubled() -> None:
    """A 2-minute soak under kills, pauses, killed sessions, a restart, a partition, packet loss,
    a held snapshot, foreign row locks, a read-only database, a revoked grant, operators revoking
    running jobs and pausing the queue, and skewed clocks,
    with async and thread handlers, loses no job, applies no transfer twice, keeps the money."""
    argv = [sys.executable, "-m", "tenure.cli", "soak", "--json", "--duration", "120"]
    argv += ["--fault-gap", "1", "--rate", "15", "--drain-timeout", "90"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=420, env=os.environ.copy())
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout)
    failed = [c for c in report["checks"] if not c["ok"]] + report["failures"]
    assert done.returncode == 0 and report["ok"], (failed, done.stderr[-3000:])
    assert report["jobs"]["lost"] == 0
    assert report["money"]["applied_more_than_once"] == 0
    assert report["jobs"]["enqueued"] > 500
    skipped = {f["fault"]: f["detail"] for f in report["faults"] if f["skipped"]}
    # A fault that could not run fails the soak (its own check) and this test: it is never
    # passed over quietly, whatever the machine lacks.
    for fault, count in report["fault_counts"].items():
        assert count > 0, f"fault {fault} never ran: {skipped.get(fault)}"
    assert {"row_locks", "read_only", "revoke", "job_revoke", "queue_pause"} <= set(report["fault_counts"])
    assert report["leases"]["lease_expirations"] > 0

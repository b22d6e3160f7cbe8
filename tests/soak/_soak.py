"""Runs `tenure soak --json` in a real subprocess and asserts the verdict every soak must reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def run_soak(*options: str, timeout: float) -> dict[str, Any]:
    """The soak's report, once every check held, nothing was lost or doubled and every fault of
    its schedule ran (one that could not run fails the soak: it is never passed over quietly)."""
    argv = [sys.executable, "-m", "tenure.ops.cli", "soak", "--json", *options]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    assert done.stdout.strip(), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    failed = [c for c in report["checks"] if not c["ok"]] + report["failures"]
    assert done.returncode == 0 and report["ok"], (failed, done.stderr[-3000:])
    assert report["jobs"]["missing_acknowledged"] == 0 and report["jobs"]["unfinished"] == 0
    assert report["money"]["applied_more_than_once"] == 0
    skipped = {f["fault"]: f["detail"] for f in report["faults"] if f["skipped"]}
    for fault, count in report["fault_counts"].items():
        assert count > 0, f"fault {fault} never ran: {skipped.get(fault)}"
    return report

"""Runs `tenure soak --json` in a real subprocess and asserts the verdict every soak must reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

#: What a soak may never get wrong, however loaded the machine: a run that breaks one of these
#: fails at once; one that only missed a bound of time or progress may be run once more.
SAFETY_WORDS = ("missing", "lost", "twice", "doubled", "exactly once", "money", "fence", "stale")


def _safety_held(report: dict[str, Any]) -> bool:
    failed = [c["name"] for c in report["checks"] if not c["ok"]]
    return (
        report["jobs"].get("missing_acknowledged", 0) == 0
        and report["money"].get("applied_more_than_once", 0) == 0
        and not any(word in name for name in failed for word in SAFETY_WORDS)
    )


def run_soak(*options: str, timeout: float, liveness_retry: bool = False) -> dict[str, Any]:
    """The soak's report, once every check held, nothing was lost or doubled and every fault of
    its schedule ran (one that could not run fails the soak: it is never passed over quietly).
    With `liveness_retry` (the topologies whose failovers take seconds of a loaded CI machine), a
    run that kept every safety check but missed a bound of time or progress is printed and run
    once more, and the second run must pass whole."""
    argv = [sys.executable, "-m", "tenure.ops.cli", "soak", "--json", *options]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    assert done.stdout.strip(), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    failed = [c for c in report["checks"] if not c["ok"]] + report["failures"]
    if failed and liveness_retry and _safety_held(report) and not report["failures"]:
        print("\nfirst run missed a liveness bound, kept every safety check; running again:", failed)
        return run_soak(*options, timeout=timeout)
    assert done.returncode == 0 and report["ok"], (failed, done.stderr[-3000:])
    assert report["jobs"]["missing_acknowledged"] == 0 and report["jobs"]["unfinished"] == 0
    assert report["money"]["applied_more_than_once"] == 0
    skipped = {f["fault"]: f["detail"] for f in report["faults"] if f["skipped"]}
    for fault, count in report["fault_counts"].items():
        assert count > 0, f"fault {fault} never ran: {skipped.get(fault)}"
    return report

"""The app of the failover-aware lease tests (tests/scaleout/failover/test_failover_aware_leases.py).

Its one task writes a row and completes in ONE transaction (ctx.atomic_sync), and stalls inside
that transaction until the test releases the worker process that runs it (`release-<pid>`), so
the test can change the job's row underneath, as a promoted standby that never received the
claim would have it. Every start is appended to `starts-<pid>`, so a test can count how often
one process began the job.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import tenure

app = tenure.Tenure()

RESULTS_TABLE = "public.failover_results"


@app.task(name="failover.hold_in_transaction", max_attempts=5)
def hold_in_transaction(ctx: tenure.JobContext, marker_dir: str, hold_seconds: float = 60.0) -> None:
    """Writes (job, token, pid) and completes in one transaction, stalled until released."""
    pid = os.getpid()
    markers = Path(marker_dir)
    with (markers / f"starts-{pid}").open("a") as starts:
        starts.write(f"{ctx.job_id} {ctx.token}\n")

    def work(tx: tenure.SyncTransaction) -> None:
        insert = f"INSERT INTO {RESULTS_TABLE} (job_id, token, pid) VALUES (%s, %s, %s)"
        tx.execute(insert, (ctx.job_id, ctx.token, pid))
        (markers / f"inside-{pid}").touch()
        deadline = time.monotonic() + hold_seconds
        while not (markers / f"release-{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    ctx.atomic_sync(work)

"""The app a real worker process runs in tests/ops: one task that succeeds."""

from __future__ import annotations

import tenure

app = tenure.Tenure()


@app.task(name="ops.noop", queue="ops")
def noop(ctx: tenure.JobContext) -> None:
    """Does nothing, successfully."""

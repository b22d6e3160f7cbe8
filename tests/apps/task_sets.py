"""Two apps with different task sets, as two versions of a deployment would be: `alpha` knows
tasks a.*, `beta` knows b.*. Each handler leaves a marker naming the process that ran it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import tenure

alpha = tenure.Tenure()
beta = tenure.Tenure()


def _mark(ctx: tenure.JobContext, marker_dir: str, app: str) -> None:
    path = Path(marker_dir) / f"ran-{ctx.job_id}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "app": app, "attempt": ctx.attempt}))
    tmp.rename(path)


@alpha.task(name="a.work", queue="shared", max_attempts=1)
def a_work(ctx: tenure.JobContext, marker_dir: str) -> None:
    _mark(ctx, marker_dir, "alpha")


@beta.task(name="b.work", queue="shared", max_attempts=1)
def b_work(ctx: tenure.JobContext, marker_dir: str) -> None:
    _mark(ctx, marker_dir, "beta")

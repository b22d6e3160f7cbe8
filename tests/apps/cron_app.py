"""The app real worker processes run in the periodic-job boundary test (x12): three schedules firing
every second, one per missed-slot policy. Each job appends the worker's own wall clock to
`$CRON_CLOCK_DIR/<pid>.jsonl`, so the test can see which workers ran with a skewed clock."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import tenure

app = tenure.Tenure()

CLOCK_DIR_ENV = "CRON_CLOCK_DIR"


def note_clock(ctx: tenure.JobContext) -> None:
    folder = os.environ.get(CLOCK_DIR_ENV)
    if folder:
        with (Path(folder) / f"{os.getpid()}.jsonl").open("a") as log:
            log.write(json.dumps({"job": ctx.job_id, "local": time.time()}) + "\n")


@app.periodic("* * * * * *", name="cron.latest", queue="cron", missed="latest")
def latest(ctx: tenure.JobContext) -> None:
    note_clock(ctx)


@app.periodic("* * * * * *", name="cron.skip", queue="cron", missed="skip")
def skip(ctx: tenure.JobContext) -> None:
    note_clock(ctx)


@app.periodic("* * * * * *", name="cron.backfill", queue="cron", missed=("backfill", 3))
def backfill(ctx: tenure.JobContext) -> None:
    note_clock(ctx)

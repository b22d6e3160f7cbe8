"""Tasks for the tests of a real `manage.py tenure_worker`'s ORM connections: the example shop's
app, with tasks that report the server process behind their thread's Django connection."""

import time
from pathlib import Path

from django.db import connection
from shop.models import Order
from shop.tasks import app

import tenure

__all__ = ["app"]

#: How long a job waits for the test's go-ahead; a test that gives none fails on the job's state.
WAIT = 60.0


def backend_pid() -> int:
    """The server process of this thread's Django connection (the ORM's, not Tenure's)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def write(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.rename(path)  # the test never reads half a file


def wait_for(ctx: tenure.JobContext, path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists() and time.monotonic() < deadline:
        ctx.check()
        time.sleep(0.02)


@app.task(name="probe.orm", queue="probe", max_attempts=5)
def orm(ctx: tenure.JobContext, email: str) -> int:
    """Writes an order through the ORM; returns the connection's server process."""
    Order.objects.create(email=email)
    return backend_pid()


@app.task(name="probe.held", queue="probe", max_attempts=5)
def held(ctx: tenure.JobContext, folder: str, until: int) -> int:
    """Connects, then holds its thread until `until` jobs of the batch in `folder` have connected,
    so that each thread of the worker's pool holds a connection; returns its server process."""
    pid = backend_pid()
    here = Path(folder)
    write(here / f"{ctx.job_id}.pid", str(pid))
    deadline = time.monotonic() + WAIT
    while len(list(here.glob("*.pid"))) < until and time.monotonic() < deadline:
        ctx.check()
        time.sleep(0.02)
    return pid


@app.task(name="probe.killed_mid_run", queue="probe", max_attempts=5)
def killed_mid_run(ctx: tenure.JobContext, folder: str, email: str) -> int:
    """At its first attempt, reports its connection's server process and waits until the test has
    terminated it; then writes an order through the ORM, which fails on that first attempt."""
    here = Path(folder)
    if ctx.attempt == 1:
        write(here / "pid", str(backend_pid()))
        wait_for(ctx, here / "killed")
    Order.objects.create(email=email)
    return backend_pid()

"""mypy sees a task's parameters: `task.enqueue(...)` is checked against the handler's own
signature (ParamSpec), so a wrong argument is a type error before the code ever runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api

SRC = Path(__file__).resolve().parents[2] / "src"
PROGRAM = textwrap.dedent(
    """
    import tenure

    app = tenure.Tenure()


    @app.task(queue="emails")
    async def send_receipt(ctx: tenure.JobContext, order_id: int, email: str) -> None: ...


    @app.task
    def compress(ctx: tenure.JobContext, folder: str) -> None: ...


    @app.task(max_attemps=3)
    def misspelt_policy(ctx: tenure.JobContext) -> None: ...


    async def good() -> None:
        job: tenure.EnqueuedJob = await send_receipt.enqueue(order_id=7, email="a@b.c")
        await send_receipt.with_options(delay=60).enqueue(7, "a@b.c")
        compress.enqueue_sync(folder="/logs")
        await app.cancel([job.id], reason="refunded")
        app.pause_queue_sync("emails", reason="provider down", until=600)
        paused: list[tenure.QueuePause] = app.paused_queues_sync()


    async def bad() -> None:
        await send_receipt.enqueue(order_id="7", email="a@b.c")
        await send_receipt.enqueue(order_id=7)
        compress.enqueue_sync(directory="/logs")
        await send_receipt.with_options(dealy=60).enqueue(7, "a@b.c")
        await app.enqueue(send_receipt, {"order_id": 7, "email": "a@b.c"}, priorty=5)
        await app.cancel([1])
        app.retry_sync([1], reson="again")
    """
)


@pytest.mark.slow
def test_mypy_accepts_right_calls_and_flags_each_wrong_one(tmp_path: Path) -> None:
    """The eight wrong calls (a str for an int, a missing argument, an unknown keyword, a misspelt
    task policy option, a misspelt enqueue option twice, an app control verb without its required
    reason or with a misspelt one) are each a mypy error on their line; the right ones are not."""
    program = tmp_path / "uses_tasks.py"
    program.write_text(PROGRAM)
    flags = ["--strict", "--no-incremental", "--python-version", "3.11", "--no-error-summary"]
    stdout, stderr, _ = api.run([str(program), *flags, "--cache-dir", str(tmp_path / "cache")])
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    lines = PROGRAM.splitlines()
    flagged = {lines[int(e.split(":")[1]) - 1].strip() for e in errors}
    assert flagged == {
        "@app.task(max_attemps=3)",
        'await send_receipt.enqueue(order_id="7", email="a@b.c")',
        "await send_receipt.enqueue(order_id=7)",
        'compress.enqueue_sync(directory="/logs")',
        'await send_receipt.with_options(dealy=60).enqueue(7, "a@b.c")',
        'await app.enqueue(send_receipt, {"order_id": 7, "email": "a@b.c"}, priorty=5)',
        "await app.cancel([1])",
        'app.retry_sync([1], reson="again")',
    }, stdout + stderr

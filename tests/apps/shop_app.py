"""The app `tenure enqueue` tests load: tasks with their own queue, priority and attempts."""

from __future__ import annotations

import tenure

app = tenure.Tenure()


@app.task(queue="emails", max_attempts=3)
async def send(ctx: tenure.JobContext, to: str, subject: str = "hello") -> None:
    """Named by default: tests.apps.shop_app.send, so its module follows from its name."""


@app.task(name="reports.build", queue="reports", priority=5)
def build(ctx: tenure.JobContext, report_id: int) -> None:
    """Named by hand, so `tenure enqueue reports.build` needs --app tests.apps.shop_app."""

"""The app whose worker runs the billing jobs the browser test reprocesses."""

from __future__ import annotations

from typing import Any

from tenure import JobContext, Tenure

app = Tenure()


@app.task(name="billing.charge", queue="billing")
async def charge(ctx: JobContext, customer_id: int, amount: int) -> dict[str, Any]:
    return {"charged": amount, "customer_id": customer_id}

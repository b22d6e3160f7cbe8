"""The shop's Tenure app: $TENURE_DSN, else the embedded server."""

import tenure

app = tenure.Tenure()


@app.task(queue="receipts", max_attempts=5)
async def send_receipt(ctx: tenure.JobContext, order_id: int, email: str) -> str:
    # Stands in for the e-mail provider's call; ctx.idempotency_key would deduplicate its retries.
    return f"receipt for order {order_id} sent to {email}"

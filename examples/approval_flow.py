"""An order that waits for a person's approval, up to three days, holding no worker slot meanwhile.

`shop.place_order` reserves the stock (once: through the effect ledger, so the run after the wait
does not reserve it again), then waits for a signal to `approve:<order>`. The approver's answer
arrives as a signal from anywhere (a web request, the CLI, SQL). Approved: the card is charged.
Refused, or no answer in three days: the reservation is released and the order cancelled.

Run it against any database: `python examples/approval_flow.py postgresql://...`
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Any

import tenure

app = tenure.Tenure()
#: What the outside world saw, by order.
reserved: list[str] = []
charged: list[str] = []
released: list[str] = []


@app.task(name="shop.place_order")
async def place_order(ctx: tenure.JobContext, order: str, amount: int) -> dict[str, Any]:
    # Done once, whatever the number of runs: the run after the wait gets the recorded outcome.
    await ctx.effect("reserve", perform=lambda key: reserved.append(order) or {"reservation": key})
    answer = await ctx.wait_for(f"approve:{order}", timeout=timedelta(days=3))
    if answer.signalled and answer.payload.get("approved"):
        await ctx.effect("charge", perform=lambda key: charged.append(order) or {"charge": key})
        return {"order": order, "outcome": "charged", "by": answer.payload.get("by")}
    await ctx.effect("release", perform=lambda key: released.append(order) or {"released": key})
    why = "refused" if answer.signalled else "no answer in time" if answer.timed_out else "ended"
    return {"order": order, "outcome": "cancelled", "why": why}


async def main(dsn: str | None = None) -> dict[str, Any]:
    """Two orders: one approved while it waits, one refused before it began to wait (the signal
    is kept for it). Returns what each job returned and what the outside world saw."""
    app.dsn = dsn
    await app.migrate()
    first = await app.enqueue("shop.place_order", {"order": "A-1", "amount": 4200}, result_wanted=True)
    # Sent before its order waits: kept in the mailbox, taken by the wait when it comes.
    await app.signal("approve:B-2", {"approved": False, "by": "ana"}, idempotency_key="form-77")
    second = await app.enqueue("shop.place_order", {"order": "B-2", "amount": 900}, result_wanted=True)
    worker = app.worker(poll_interval=0.05, concurrency=2)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(200):  # until A-1 waits: its slot is free meanwhile
            job = await app.client.get_job(first.id)
            if job is not None and job.state is tenure.JobState.WAITING:
                break
            await asyncio.sleep(0.05)
        await app.signal("approve:A-1", {"approved": True, "by": "bo"}, idempotency_key="form-78")
        results = [await app.result(j.id, timeout=20, poll=0.1) for j in (first, second)]
    finally:
        worker.stop()
        await running
        await app.close()
    return {"results": results, "reserved": reserved, "charged": charged, "released": released}


if __name__ == "__main__":
    report = asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
    for result in report["results"]:
        print(result)
    print(f"reserved {report['reserved']}, charged {report['charged']}, released {report['released']}")

"""External side effects that a retry must not repeat.

Two calls, each interrupted after the outside world acted and before the job finished:

* `shop.charge_card` calls a payment API that deduplicates by idempotency key. The job passes
  `ctx.step_key("charge")`, which is the same on every retry, so the retry is harmless.
* `shop.send_sms` calls a gateway with no idempotency. The call goes through the effect ledger:
  the retry finds the earlier attempt's intent, marks the effect uncertain, and the reconcile
  hook asks the gateway whether the message went out before anything is sent again.

Run it against any database: `python examples/external_effects.py postgresql://...`
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from typing import Any

import tenure


@dataclass
class PaymentProvider:
    """Stands in for a payment API with idempotency keys (most have them)."""

    requests: list[str] = field(default_factory=list)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)

    def charge(self, amount: int, idempotency_key: str) -> dict[str, Any]:
        self.requests.append(idempotency_key)
        if idempotency_key not in self.charges:
            self.charges[idempotency_key] = {"charge": f"ch_{len(self.charges) + 1}", "amount": amount}
        return self.charges[idempotency_key]


@dataclass
class SmsGateway:
    """Stands in for an API without idempotency, but which can be asked what it sent."""

    sent: list[dict[str, str]] = field(default_factory=list)

    def send(self, to: str, text: str, reference: str) -> dict[str, str]:
        message = {"id": f"sms_{len(self.sent) + 1}", "to": to, "reference": reference}
        self.sent.append(message)
        return message

    def find(self, reference: str) -> dict[str, str] | None:
        return next((m for m in self.sent if m["reference"] == reference), None)


payments = PaymentProvider()
gateway = SmsGateway()
app = tenure.Tenure()
QUICK = tenure.Backoff(base=0.05, cap=0.1, jitter=0.0)


@app.task(name="shop.charge_card", backoff=QUICK)
def charge_card(ctx: tenure.JobContext, order: str, amount: int) -> None:
    receipt = payments.charge(amount, idempotency_key=ctx.step_key("charge"))
    if ctx.attempt == 1:  # the reply is lost: the charge happened, the job does not know it
        raise ConnectionError(f"connection reset after charging {receipt['charge']}")


@app.task(name="shop.send_sms", backoff=QUICK)
def send_sms(ctx: tenure.JobContext, order: str, phone: str) -> None:
    def perform(key: str) -> dict[str, str]:
        message = gateway.send(phone, f"order {order} is on its way", reference=key)
        if ctx.attempt == 1:  # sent, and then the worker lost its footing before recording it
            raise ConnectionError("connection reset after sending")
        return message

    def reconcile(record: tenure.EffectRecord) -> tenure.Confirmed | tenure.NotHappened:
        found = gateway.find(record.key)
        return tenure.Confirmed(found) if found else tenure.NotHappened()

    ctx.effect_sync("sms", perform=perform, reconcile=reconcile)


async def main(dsn: str | None = None) -> dict[str, Any]:
    """Runs both jobs to completion and reports what the outside world saw."""
    app.dsn = dsn
    await app.migrate()
    charge = await app.enqueue("shop.charge_card", {"order": "A-17", "amount": 4200})
    sms = await app.enqueue("shop.send_sms", {"order": "A-17", "phone": "+15550100"})
    worker = app.worker(poll_interval=0.05, concurrency=2)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(400):
            jobs = [await app.client.get_job(j.id) for j in (charge, sms)]
            if all(j is not None and j.state.is_terminal for j in jobs):
                break
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await running
        await app.close()
    states = [j.state.value if j else None for j in jobs]
    return {
        "job_states": states,
        "charge_requests": len(payments.requests),
        "distinct_charge_keys": len(set(payments.requests)),
        "charges_made": len(payments.charges),
        "sms_sent": len(gateway.sent),
    }


if __name__ == "__main__":
    report = asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
    print(report)
    print(
        f"payment API: {report['charge_requests']} requests with {report['distinct_charge_keys']} key, "
        f"{report['charges_made']} charge; SMS gateway: {report['sms_sent']} message, reconciled, not resent"
    )

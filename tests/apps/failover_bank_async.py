"""The demo bank's transfer as a coroutine, under the same task name and queue, for the failover
tests' workers whose clocks libfaketime moves.

libfaketime 0.9.10 with Python 3.11 hangs every timed wait of a thread (`Event.wait(0.5)` never
returns), which the demo's plain-function transfer meets in its synchronous pool the moment a
failover empties that pool: an artefact of the clock-faking library, not of a skewed host. The
coroutine runs on the event loop, whose waits are unaffected, and moves the money with the same
statements in its own transaction with the fenced completion (ctx.atomic), so the bank's checks
hold for both kinds of worker alike.
"""

from __future__ import annotations

import asyncio
import random

from tenure import Backoff, JobContext, Tenure
from tenure.handler.transaction import AsyncTransaction
from tenure.ops.demo.bank import EXTERNAL_LATENCY, QUEUE, TRANSFER, TRANSFER_TXN, InsufficientFunds

app = Tenure()

LOCK_PAIR = (
    "SELECT id, balance FROM bank.accounts WHERE id IN (%(source)s, %(target)s) ORDER BY id FOR UPDATE"
)
APPLY = """
WITH moved AS (
    UPDATE bank.accounts
    SET balance = balance + CASE WHEN id = %(source)s THEN -%(amount)s::bigint ELSE %(amount)s::bigint END
    WHERE id IN (%(source)s, %(target)s)
    RETURNING id
)
INSERT INTO bank.ledger (job_id, idempotency_key, token, source, target, amount)
SELECT %(job_id)s, %(idempotency_key)s, %(token)s, %(source)s, %(target)s, %(amount)s
WHERE (SELECT count(*) FROM moved) = 2
"""


async def transfer(ctx: JobContext, source: int, target: int, amount: int) -> None:
    """Moves `amount` from `source` to `target` and records it in the ledger, exactly once."""
    await asyncio.sleep(random.uniform(*EXTERNAL_LATENCY))
    pair = {"source": source, "target": target}

    async def move(tx: AsyncTransaction) -> None:
        balances = {r["id"]: r["balance"] for r in await tx.execute(LOCK_PAIR, pair)}
        if balances.get(source, 0) < amount:
            raise InsufficientFunds(
                f"account {source} holds {balances.get(source, 0)}, cannot send {amount}",
                code="INSUFFICIENT_FUNDS",
            )
        params = {**pair, "amount": amount, "job_id": ctx.job_id, "token": ctx.token}
        await tx.execute(APPLY, {**params, "idempotency_key": ctx.idempotency_key})

    await ctx.atomic(move, policy=TRANSFER_TXN)


app.task(transfer, name=TRANSFER, queue=QUEUE, max_attempts=25, backoff=Backoff(base=0.05, cap=1.0))

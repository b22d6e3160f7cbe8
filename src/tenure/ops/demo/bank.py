"""The demo bank's Tenure app: one task, a money transfer that completes in its own transaction.

Workers load it like any user app: `tenure worker tenure.ops.demo.bank --schema ...`, with the
database in $TENURE_DSN.
"""

from __future__ import annotations

import random
import time

from tenure import Backoff, JobContext, Permanent, SyncTransaction, Tenure, TransactionPolicy
from tenure.ops.demo.queries import BankQueries

TRANSFER = "demo.transfer"
QUEUE = "bank"

#: Seconds of simulated outside work (a fraud check, a call to a card network) before the
#: transaction: it keeps several jobs in flight per worker, so a paused worker is caught mid-job.
EXTERNAL_LATENCY = (0.002, 0.03)

#: A lock wait is bounded well inside the lease: a transfer stuck behind a paused worker's
#: row locks gives up as contention and retries, rather than sitting on its lease until it expires.
TRANSFER_TXN = TransactionPolicy(lock_timeout_ms=500)


class InsufficientFunds(Permanent):
    """The source account cannot cover the amount: retrying the same transfer cannot help."""


app = Tenure()
bank = BankQueries()  # the transfer statements touch only the bank's own tables


# A plain function, so it runs on a worker thread like most real handlers (blocking HTTP
# clients, SDKs). A thread cannot be cancelled: when its worker is frozen past the lease and
# then resumes, the worker's own watchdog can mark the job lost but cannot stop the thread,
# and the only thing between the stale transfer and the ledger is the fence in ctx.atomic_sync.
def transfer(ctx: JobContext, source: int, target: int, amount: int) -> None:
    """Moves `amount` from `source` to `target` and records it in the ledger, exactly once."""
    time.sleep(random.uniform(*EXTERNAL_LATENCY))

    def move(tx: SyncTransaction) -> None:
        balances = bank.lock_pair(tx, source, target)
        if balances.get(source, 0) < amount:
            raise InsufficientFunds(
                f"account {source} holds {balances.get(source, 0)}, cannot send {amount}",
                code="INSUFFICIENT_FUNDS",
            )
        bank.apply(tx, ctx, source=source, target=target, amount=amount)

    # The ledger row and the fenced completion commit together or not at all: if the
    # lease was lost, the fence fails and the money movement rolls back with it.
    ctx.atomic_sync(move, policy=TRANSFER_TXN)


app.task(transfer, name=TRANSFER, queue=QUEUE, max_attempts=25, backoff=Backoff(base=0.05, cap=1.0))

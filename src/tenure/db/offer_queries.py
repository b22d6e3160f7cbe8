"""Typed access to an idle worker's offer (handoff.sql): made, renewed and withdrawn by the worker
whose slot it offers; taken by an enqueue's own statement (ProducerQueries, job_hand_off)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db.arrays import text_array
from tenure.db.fetch import fetch_first
from tenure.db.queries import CLAIM_COLUMNS
from tenure.db.sqlfiles import named_queries

#: The handed job's columns that its notification's JSON carries as text (CLAIM_COLUMNS).
_TIMES = ("lease_expires_at", "lease_deadline", "available_at", "created_at", "db_now")


class OfferQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)

    async def make(
        self,
        conn: AsyncConnection[Any],
        *,
        worker: str,
        channel: str,
        queues: Sequence[str],
        tasks: Sequence[str],
        lease_seconds: float,
        runtime_seconds: float,
        stands_for: float,
        now: datetime | None = None,
    ) -> None:
        """Offers one slot for `stands_for` seconds of database time (from `now`, for tests)."""
        params = {
            "worker": worker,
            "channel": channel,
            "queues": text_array(queues),
            "tasks": text_array(tasks),
            "lease_seconds": lease_seconds,
            "runtime_seconds": runtime_seconds,
            "stands_for": stands_for,
            "now": now,
        }
        await conn.execute(self._sql["offer_make"], params)

    async def renew(
        self, conn: AsyncConnection[Any], *, worker: str, stands_for: float, now: datetime | None = None
    ) -> int | None:
        """The offer's slots left (0: a job took it) once made to stand longer; None: no offer."""
        params = {"worker": worker, "stands_for": stands_for, "now": now}
        row = await fetch_first(conn, self._sql["offer_renew"], params)
        return None if row is None else int(row[0])

    async def withdraw(self, conn: AsyncConnection[Any], *, worker: str) -> int | None:
        """The withdrawn offer's slots (0: a job took it first); None: there was none."""
        row = await fetch_first(conn, self._sql["offer_withdraw"], {"worker": worker})
        return None if row is None else int(row[0])


def handed_row(payload: str) -> tuple[Any, ...]:
    """A handed job's notification (job_hand_off's JSON object of claimed_columns) as the row a
    claim returns, in CLAIM_COLUMNS order and with its types. Raises ValueError for one that is
    not such an object."""
    values = json.loads(payload)
    if not isinstance(values, dict) or values.keys() != set(CLAIM_COLUMNS):
        raise ValueError(f"a hand-off notification holds {payload[:80]!r}, not a claimed job")
    for name in _TIMES:
        values[name] = datetime.fromisoformat(values[name])
    values["idempotency_key"] = uuid.UUID(values["idempotency_key"])
    return tuple(values[name] for name in CLAIM_COLUMNS)

"""Typed access to the named queries of waits and signals (waits.sql): a handler's wait, a signal
sent, an operator's end of a wait, and what waits. Written once, async; tools/async_to_sync.py
writes its blocking twin (tenure.db.sync.wait_queries), which thread handlers and the blocking
client run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure.db.channels import notify_channel
from tenure.db.fetch import fetch, fetch_as
from tenure.db.sqlfiles import named_queries
from tenure.db.text import storable_text
from tenure.db.wait_rows import SignalsSummary, SignalsSwept, WaitsExpired, WaitStep
from tenure.model.waits import SignalSent, Waiting, WaitRecord

ASYNC = True


class WaitQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.channel = notify_channel(schema)
        self._sql = named_queries(schema)

    async def job_wait(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        owner: str,
        token: int,
        name: str,
        key: str | None,
        timeout: float | None,
        now: datetime | None = None,
    ) -> WaitStep:
        """The lease holder's wait named `name`: for a signal to `key` (None: a sleep) until
        `timeout` seconds from now (None: no deadline). See waits.sql for each outcome."""
        params = {
            "id": job_id,
            "owner": owner,
            "token": token,
            "name": name,
            "key": key,
            "timeout": timeout,
            "now": now,
        }
        [row] = await fetch(conn, self._sql["job_wait"], params)
        return WaitStep(**row)

    async def signal(
        self,
        conn: AsyncConnection[Any],
        *,
        key: str,
        payload_json: str,
        idempotency_key: str | None,
        keep_seconds: float,
        sender: str | None = None,
        note: str | None = None,
    ) -> SignalSent:
        """Sends one signal through signal(), in `conn`'s transaction: from `sender` (None: the
        database role), with `note` in the history of a job it wakes at once."""
        params = {
            "key": key,
            "payload": payload_json,
            "idempotency_key": idempotency_key,
            "keep_seconds": keep_seconds,
            "sender": None if sender is None else storable_text(sender, 200),
            "note": None if note is None else storable_text(note, 1000),
        }
        [row] = await fetch(conn, self._sql["signal_send"], params)
        return SignalSent(row["signal_id"], row["outcome"], row["job_id"])

    async def end_wait(
        self, conn: AsyncConnection[Any], *, job_id: int, actor: str, reason: str, now: datetime | None = None
    ) -> str | None:
        """Ends job `job_id`'s wait (it runs again at once); the wait's name, None when the job
        does not wait."""
        params = {
            "id": job_id,
            "actor": storable_text(actor, 200),
            "reason": storable_text(reason, 1000),
            "channel": self.channel,
            "now": now,
        }
        rows = await fetch(conn, self._sql["wait_end"], params)
        return str(rows[0]["name"]) if rows else None

    async def waits_of(self, conn: AsyncConnection[Any], job_id: int) -> list[WaitRecord]:
        return await fetch_as(conn, WaitRecord, self._sql["job_waits_of"], {"id": job_id})

    async def waiting(
        self,
        conn: AsyncConnection[Any],
        *,
        queue: str | None = None,
        limit: int = 100,
        now: datetime | None = None,
    ) -> list[Waiting]:
        params = {"queue": queue, "limit": limit, "now": now}
        return await fetch_as(conn, Waiting, self._sql["waits_list"], params)

    async def summary(self, conn: AsyncConnection[Any]) -> SignalsSummary:
        [row] = await fetch_as(conn, SignalsSummary, self._sql["signals_summary"], {})
        return row

    async def expire_due(
        self, conn: AsyncConnection[Any], *, limit: int, now: datetime | None = None
    ) -> WaitsExpired:
        """Ends up to `limit` waits whose deadline passed by `now` (database time by default)."""
        params = {"limit": limit, "channel": self.channel, "now": now}
        [row] = await fetch_as(conn, WaitsExpired, self._sql["waits_expire_due"], params)
        return row

    async def sweep(self, conn: AsyncConnection[Any], *, batch: int) -> SignalsSwept:
        [row] = await fetch_as(conn, SignalsSwept, self._sql["signals_sweep_run"], {"batch": batch})
        return row

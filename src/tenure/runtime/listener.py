"""LISTEN on its own direct connection; a notification only wakes the claimer (N1, N2)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg import sql

from tenure.db.queries import notify_channel, scheduled_hint

log = logging.getLogger("tenure.worker")


class Listener:
    def __init__(
        self,
        dsn: str,
        schema: str,
        queues: set[str],
        wake: Callable[[], None],
        scheduled: Callable[[datetime], None] = lambda due: None,
    ) -> None:
        self.dsn = dsn
        self.channel = notify_channel(schema)
        self.queues = queues
        self.wake = wake
        self.scheduled = scheduled  # told the due time of jobs enqueued as scheduled, any queue
        self.connected = asyncio.Event()

    async def run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.connected.set()
                    delay = 0.1
                    self.wake()  # anything committed while we were not listening
                    async for note in conn.notifies():
                        if note.payload in self.queues:
                            self.wake()
                        elif (due := scheduled_hint(note.payload)) is not None:
                            self.scheduled(due)
            except psycopg.Error as exc:
                self.connected.clear()
                log.warning(
                    "listener connection lost (%s); polling continues, reconnecting in %.1fs",
                    exc,
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

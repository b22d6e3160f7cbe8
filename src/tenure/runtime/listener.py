"""LISTEN on its own direct connection; a notification only wakes the claimer (N1, N2)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

from tenure.db.queries import notify_channel

log = logging.getLogger("tenure.worker")


class Listener:
    def __init__(self, dsn: str, schema: str, queues: set[str], wake: Callable[[], None]) -> None:
        self.dsn = dsn
        self.channel = notify_channel(schema)
        self.queues = queues
        self.wake = wake
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
            except psycopg.Error as exc:
                self.connected.clear()
                log.warning(
                    "listener connection lost (%s); polling continues, reconnecting in %.1fs",
                    exc,
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

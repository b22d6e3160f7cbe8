"""An event loop on a thread of its own, on which blocking code runs coroutines: `SyncInline`
runs the worker's executor there, so a Django or Flask test needs no asyncio of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Starts a loop on a daemon thread; `run` waits for a coroutine's result on it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._serve, args=(loop,), name=self.name, daemon=True)
        self._thread.start()

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def run(self, step: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            step.close()
            raise RuntimeError(f"{self.name}: the loop thread is not started (use it as a context manager)")
        return asyncio.run_coroutine_threadsafe(step, self._loop).result()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop = self._thread = None

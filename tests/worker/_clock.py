"""A local clock for stepping services: time moves only when a service sleeps or a test says so."""

from __future__ import annotations

import asyncio


class FakeClock:
    """Local time that moves only when a service sleeps, or when a test calls `advance`."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.now += seconds

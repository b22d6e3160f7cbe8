"""The latency section's floor is probed beside the contender's own probes, one of each in every
pair, on a queue of its own; measured on a real database, with a stand-in contender whose
"handler" is the sender itself (no timings are judged here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure.lab.bench import floor, probe, sections

PROBES = 6


class StandIn:
    """What sections.latency needs of a process group: an environment, a start and a stop."""

    def __init__(self) -> None:
        self.env: dict[str, str] = {}
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


async def test_the_floor_is_probed_beside_each_of_the_contender_s_probes(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every contender probe has a floor probe beside it, before or after it, and the floor's rows
    stay in their own queue, claimed by the floor itself: a worker of the contender's queue,
    running beside it, would find none of them."""
    order: list[str] = []
    path = tmp_path / "probe.txt"

    async def send(sent: float) -> None:
        order.append("contender")
        probe.record(sent)  # the stand-in's handler runs at once, in this process

    async with floor.FloorProber(dsn) as prober:
        real_probe = prober.probe

        async def floor_probe() -> float:
            order.append("floor")
            return await real_probe()

        prober.probe = floor_probe  # type: ignore[method-assign]
        group: Any = StandIn()
        monkeypatch.setenv(probe.PROBE_FILE_ENV, str(path))  # where the stand-in's handler records
        figures = await sections.latency(group, path, send, PROBES, floor=prober)

    assert group.started and group.stopped
    assert figures["samples"] == PROBES and figures["floor"]["samples"] == PROBES
    measured = order[1:]  # the first is the contender's warm-up
    pairs = [measured[i : i + 2] for i in range(0, len(measured), 2)]
    assert len(pairs) == PROBES and all(sorted(p) == ["contender", "floor"] for p in pairs), order
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT queue, state::text, lease_owner, count(*) FROM tenure.jobs GROUP BY 1, 2, 3"
        ).fetchall()
    # The warm-up's probe and one a pair, all claimed by the floor, none left for a worker.
    assert rows == [(floor.QUEUE, "running", floor.OWNER, PROBES + 1)], rows

"""Workflows in the soak: fan-outs of FAN_OUT steps with a fan-in, chains of CHAIN steps, and
chains of two whose second step waits on its condition for a signal of its own (sent before the
workflow, kept in the mailbox, or after, once or twice, through the faults: tenure.lab.soak.signals),
enqueued through the whole run (once the upgrade has brought the current schema) and met by every
fault.

Each step makes one "external" call through `ctx.effect`, appended to the worker's effects file
like the effect kind's (tenure.lab.soak.ordered_effects). The checks: every step succeeded and
made its call exactly once, each fan-in fired once with every result in order, each chain passed
its results along, each step's condition took its own signal once, and no step was released
twice or left behind.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tenure import Client, JobContext, Signalled, TenureError, Workflow, chain
from tenure.db.sqlfiles import package_queries
from tenure.lab.soak.attempts import AttemptLog
from tenure.lab.soak.ordered_effects import external_call, performed
from tenure.lab.soak.report import Check
from tenure.lab.soak.signals import Signaller

FAN_OUT = 50
CHAIN = 3
#: Seconds between two rounds of one fan-out and one chain.
EVERY = 6.0
PART, FAN_IN, LINK = "soak.wf_part", "soak.wf_fan_in", "soak.wf_link"
#: A part of the poison fault's fan-in (tenure.lab.soak.poison): its result is BIG characters.
BIG_PART = "soak.wf_big_part"
BIG = 65_000


def _call(ctx: JobContext, value: Any) -> Any:
    """The step's one external call, through the effect ledger; returns `value`."""
    external_call(ctx, "step", {"value": value}, step=True)
    return value


def make_handlers(attempts: AttemptLog) -> dict[str, Any]:
    def part(ctx: JobContext, n: int) -> int:
        with attempts.running(ctx):
            return int(_call(ctx, n))

    def fan_in(ctx: JobContext, values: list[int]) -> int:
        with attempts.running(ctx):
            return int(_call(ctx, sum(values)))

    def link(ctx: JobContext, value: int) -> int:
        with attempts.running(ctx):
            return int(_call(ctx, value + 1))

    def big_part(ctx: JobContext, n: int) -> str:
        with attempts.running(ctx):
            return "x" * BIG

    return {PART: part, FAN_IN: fan_in, LINK: link, BIG_PART: big_part}


@dataclass
class SoakWorkflows:
    """Enqueues the workflows and judges them."""

    client: Client
    signaller: Signaller
    enqueued: dict[int, str] = field(default_factory=dict)
    failed_enqueues: int = 0
    rounds: int = 0

    def _shapes(self) -> list[tuple[str, Workflow]]:
        registry = self.client.builder.registry
        assert registry is not None
        part, fan_in, link = (registry.get(name) for name in (PART, FAN_IN, LINK))
        assert part is not None and fan_in is not None and link is not None
        fan = Workflow("soak fan-out")
        parts = fan.group([part.bind(n=n) for n in range(FAN_OUT)], name="part")
        fan.step(fan_in, after=parts, input="values", name="fan-in")
        gated = Workflow("soak gated")
        first = gated.step(link.bind(value=0), name="first")
        gated.step(link, after=first, input="value", name="gated", wait_for=Signalled(self.key()))
        return [
            ("fan", fan),
            ("chain", chain(link.bind(value=0), *[link] * (CHAIN - 1), input="value")),
            ("gated", gated),
        ]

    def key(self) -> str:
        """The signal the gated workflow of this round waits for."""
        return f"soak:step:{self.rounds}"

    async def produce(self, ready: asyncio.Event, until: float) -> None:
        """A fan-out and a chain every EVERY seconds until `until` (monotonic), from when `ready`
        is set (the schema has the workflow tables). A failed enqueue is not retried, as the
        producer's jobs are not: whether it committed is unknown."""
        waits = [
            asyncio.create_task(ready.wait()),
            asyncio.create_task(asyncio.sleep(until - time.monotonic())),
        ]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiting in waits:
            waiting.cancel()
        while time.monotonic() < until:
            self.rounds += 1
            early = self.signaller.early() and await self.signaller.send(self.client, self.key())
            for shape, wf in self._shapes():
                try:
                    run = await self.client.enqueue_workflow(wf)
                except (TenureError, OSError):
                    self.failed_enqueues += 1
                    continue
                self.enqueued[run.id] = shape
                if shape == "gated" and not early:
                    self.signaller.owe(self.key())
            next_round = min(until, time.monotonic() + EVERY)
            while time.monotonic() < next_round:
                await self.signaller.tick(self.client)
                await asyncio.sleep(min(0.5, max(0.0, next_round - time.monotonic())))

    async def send_owed(self, timeout: float) -> int:
        """Every gated step's signal still owed, tried until `timeout` seconds pass; how many were
        never sent."""
        deadline = time.monotonic() + timeout
        while self.signaller.owed and time.monotonic() < deadline:
            await self.signaller.tick(self.client, everything=True)
            if self.signaller.owed:
                await asyncio.sleep(0.5)
        return len(self.signaller.owed)

    async def checks(self, conn: AsyncConnection[Any], schema: str, run_dir: Path | None) -> list[Check]:
        ids = sorted(self.enqueued)
        async with conn.cursor(row_factory=dict_row) as cur:
            queries = package_queries("tenure.lab.soak", schema)
            await cur.execute(queries["soak_workflow_steps"], {"ids": ids})
            steps = await cur.fetchall()
            await cur.execute(queries["soak_step_conditions"], {"ids": ids})
            conditions = await cur.fetchall()
        calls = performed(run_dir, by="job", steps_only=True) if run_dir is not None else Counter()
        by_flow: dict[int, list[dict[str, Any]]] = {}
        for s in steps:
            by_flow.setdefault(s["workflow_id"], []).append(s)
        unfinished = [
            f"{s['workflow_id']}/{s['name']} {s['state']}" for s in steps if s["state"] != "succeeded"
        ]
        twice = [f"{s['workflow_id']}/{s['name']}" for s in steps if s["jobs"] > 1]
        calls_wrong = [f"job {s['job_id']}: {calls[s['job_id']]}" for s in steps if calls[s["job_id"]] != 1]
        fan_wrong, chain_wrong = [], []
        for flow_id, shape in self.enqueued.items():
            rows = {s["name"]: s for s in by_flow.get(flow_id, [])}
            if shape == "fan":
                got = (rows.get("fan-in") or {}).get("payload") or {}
                if got.get("values") != list(range(FAN_OUT)) or rows["fan-in"]["result"] != sum(
                    range(FAN_OUT)
                ):
                    fan_wrong.append(f"{flow_id}: {str(got)[:80]}")
            elif shape == "gated":
                if (rows.get("gated") or {}).get("result") != 2:
                    chain_wrong.append(f"{flow_id} (gated)")
            else:
                last = [s for s in by_flow.get(flow_id, []) if s["name"].startswith("soak.wf_link")][-1:]
                if not last or last[0]["result"] != CHAIN:
                    chain_wrong.append(str(flow_id))
        shapes = Counter(self.enqueued.values())
        conditions_wrong = [
            f"{c['workflow_id']}: {c['wait']}, {c['delivered']} signals"
            for c in conditions
            if (c["wait"], c["delivered"]) != ("signalled", 1)
        ]
        return [
            Check(
                "every workflow step ran and made its call exactly once, none released twice",
                bool(steps) and not unfinished and not twice and not calls_wrong,
                f"{shapes['fan']} fan-outs of {FAN_OUT} and {shapes['chain']} chains of {CHAIN}: "
                f"{len(steps)} steps; not succeeded: {unfinished[:5] or 'none'}; released twice: "
                f"{twice[:5] or 'none'}; calls not once: {calls_wrong[:5] or 'none'}"
                + (f"; {self.failed_enqueues} enqueues failed under faults" if self.failed_enqueues else ""),
            ),
            Check(
                "each fan-in fired once with every result, each chain passed its results along",
                not fan_wrong and not chain_wrong and shapes["fan"] > 0 and shapes["chain"] > 0,
                f"fan-ins wrong: {fan_wrong[:3] or 'none'}; chains wrong: {chain_wrong[:3] or 'none'}",
            ),
            Check(
                "each step waiting on its condition took its own signal, once",
                shapes["gated"] > 0 and len(conditions) == shapes["gated"] and not conditions_wrong,
                f"{len(conditions)} gated steps of {shapes['gated']} gated workflows ("
                f"{self.signaller.sent} signals sent, {self.signaller.duplicates} a second time, "
                f"{self.signaller.failed_sends} sends failed and were tried again); "
                f"wrong: {conditions_wrong[:5] or 'none'}",
            ),
        ]

"""The soak's poison completions: completions the database cannot do as asked, beside the fleet's
other work. Each turn enqueues a fan-in whose parents' results together exceed a step's input
bound (POISON_PARTS results of BIG characters: more than 32 MiB), and holds one workflow step's
row from a foreign session for two leases while its parent completes.

Judged at the end: every poisoned fan-in is held with INPUT_TOO_LARGE while each of its parents
succeeded, once; each locked step's parent could not complete while the row was held, jobs
completed elsewhere meanwhile, and the step ran once after the hold.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tenure import Client, TenureError, Workflow
from tenure.db.connect import connect
from tenure.db.sqlfiles import package_queries
from tenure.lab.soak.app import app
from tenure.lab.soak.queries import SoakQueries
from tenure.lab.soak.report import Check
from tenure.lab.soak.scope import FaultScope
from tenure.lab.soak.workflows import BIG_PART, FAN_IN, LINK, PART

#: Parents of a poisoned fan-in, each returning BIG characters: 520 x 65,002 bytes of JSON is
#: 33.8 MB, past a step's 32 MiB input, while each result stays within the default 64 KiB.
POISON_PARTS = 520
#: Leases the foreign session holds the step's row.
HOLD_LEASES = 2.0


class PoisonCompletions:
    def __init__(self, scope: FaultScope, schema_current: asyncio.Event) -> None:
        self.scope = scope
        self.schema_current = schema_current
        self.queries = SoakQueries(scope.schema)
        self._sql = package_queries("tenure.lab.soak", scope.schema)
        self.poisoned: list[int] = []
        self.holds: list[dict[str, Any]] = []

    async def inject(self) -> tuple[str, str, bool]:
        if not self.schema_current.is_set():
            return "workflows", "the schema has no workflows yet (before the upgrade)", True
        registry = app.registry
        big, fan_in, part, link = (registry.get(name) for name in (BIG_PART, FAN_IN, PART, LINK))
        assert big is not None and fan_in is not None and part is not None and link is not None
        poison = Workflow("soak poisoned fan-in")
        parts = poison.group([big.bind(n=n) for n in range(POISON_PARTS)], name="part")
        poison.step(fan_in, after=parts, input="values", name="fan-in")
        locked = Workflow("soak locked step")
        parent = locked.step(part.bind(n=0), name="parent")
        locked.step(link, after=parent, input="value", name="child")
        async with Client(self.scope.dsn, schema=self.scope.schema, registry=registry) as client:
            try:
                poisoned = await client.enqueue_workflow(poison)
                held = await client.enqueue_workflow(locked)
            except (TenureError, OSError):
                return "workflows", "the workflows could not be enqueued", True
        self.poisoned.append(poisoned.id)
        return "step row", await self._hold(held.id), False

    async def _hold(self, workflow_id: int) -> str:
        """Holds the child step's row while its parent runs and tries to complete."""
        seconds = HOLD_LEASES * self.scope.lease
        async with await connect(self.scope.dsn, autocommit=False) as conn:
            await self._rows(conn, "soak_lock_step", {"id": workflow_id, "step": "child"})
            began = (await self._rows(conn, "soak_step_jobs", {"id": workflow_id}))[0]["db_now"]
            await asyncio.sleep(seconds)
            during = await self._rows(conn, "soak_step_jobs", {"id": workflow_id})
            ended = during[0]["db_now"]
            await conn.rollback()
        async with await connect(self.scope.dsn) as conn:
            elsewhere = len(await self.queries.completions_between(conn, began, ended))
        parent_states = [r["state"] for r in during if r["step"] == "parent"]
        self.holds.append(
            {
                "workflow": workflow_id,
                "seconds": round((ended - began).total_seconds(), 2),
                "parent_while_held": parent_states,
                "completed_elsewhere": elsewhere,
            }
        )
        return f"held workflow {workflow_id}'s child step {seconds:g}s; {elsewhere} jobs completed meanwhile"

    async def _rows(
        self, conn: AsyncConnection[Any], name: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self._sql[name], params)
            return await cur.fetchall() if cur.description else []

    async def checks(self, conn: AsyncConnection[Any]) -> list[Check]:
        poisoned = await self._rows(conn, "soak_workflow_steps", {"ids": self.poisoned})
        held = {
            r["workflow_id"]: r["held_reason"] or ""
            for r in await self._rows(conn, "soak_held_steps", {"ids": self.poisoned})
            if r["name"] == "fan-in"
        }
        parts = [s for s in poisoned if s["name"] != "fan-in"]
        parts_wrong = [f"{s['workflow_id']}/{s['name']} {s['state']} x{s['jobs']}" for s in parts
                       if s["state"] != "succeeded" or s["jobs"] != 1]  # fmt: skip
        not_held = [w for w in self.poisoned if not held.get(w, "").startswith("INPUT_TOO_LARGE")]
        locked = await self._rows(conn, "soak_workflow_steps", {"ids": [h["workflow"] for h in self.holds]})
        jobs = Counter(
            (s["workflow_id"], s["name"]) for s in locked if s["state"] == "succeeded" and s["jobs"] == 1
        )
        holds_wrong = [
            h for h in self.holds
            if "succeeded" in h["parent_while_held"] or not h["completed_elsewhere"]
            or jobs[(h["workflow"], "parent")] != 1 or jobs[(h["workflow"], "child")] != 1
        ]  # fmt: skip
        return [
            Check(
                "a fan-in over its input bound holds only itself: its parents succeeded once each",
                bool(self.poisoned) and not not_held and not parts_wrong,
                f"{len(self.poisoned)} fan-ins of {POISON_PARTS} parents; not held with INPUT_TOO_LARGE: "
                f"{not_held[:5] or 'none'}; parents wrong: {parts_wrong[:5] or 'none'}",
            ),
            Check(
                "a held step row delayed only its own completion, which landed once after the hold",
                bool(self.holds) and not holds_wrong,
                f"{len(self.holds)} holds; wrong: {holds_wrong[:3] or 'none'}",
            ),
        ]

    def report(self) -> dict[str, Any]:
        return {"poisoned_fan_ins": list(self.poisoned), "step_row_holds": list(self.holds)}

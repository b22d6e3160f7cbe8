"""Ordered jobs and effect-recording jobs in the soak, and the checks that judge them.

An ordered job carries an ordering key; the check reads, from the database, that every job of a
key succeeded and that each was last claimed only after the previous job of its key finished.

An effect job performs one "external" call through `ctx.effect`: the call appends a line to the
worker's own effects file (flushed at once, so a SIGKILL after the call leaves it behind), and
the reconcile hook looks for that line in every worker's file. The check counts, per job, how
many times the call really happened: never more than once.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection

from tenure import Confirmed, EffectRecord, JobContext, NotHappened
from tenure.lab.soak.attempts import ATTEMPTS_ENV, AttemptLog
from tenure.lab.soak.queries import SoakQueries
from tenure.lab.soak.report import Check

EFFECTS_SUFFIX = ".effects"
ORDERING_KEYS = 8


def effects_file() -> Path | None:
    """This worker's effects file (beside its attempt log), or None outside a soak worker."""
    path = os.environ.get(ATTEMPTS_ENV)
    return Path(path + EFFECTS_SUFFIX) if path else None


def performed(run_dir: Path, *, by: str = "key", steps_only: bool = False) -> Counter[Any]:
    """How many times each call was performed over every worker's effects file, counted by
    effect key (or by job); `steps_only`: the workflow steps' calls alone."""
    seen: Counter[Any] = Counter()
    for path in run_dir.glob(f"*{EFFECTS_SUFFIX}"):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                if not steps_only or entry.get("step"):
                    seen[entry[by]] += 1
            except (ValueError, KeyError):
                continue  # a line cut short by SIGKILL was never a completed call
    return seen


def external_call(ctx: JobContext, name: str, outcome: dict[str, Any], *, step: bool = False) -> None:
    """One "external" call through the effect ledger `name`: a line appended to the worker's
    effects file (flushed at once), reconciled after a crash by looking for that line in every
    worker's file. `step` marks a workflow step's call."""
    target = effects_file()

    def perform(key: str) -> dict[str, Any]:
        if target is not None:
            line = {"key": key, "job": ctx.job_id, "token": ctx.token} | ({"step": True} if step else {})
            with target.open("a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
                f.flush()
        return outcome

    def reconcile(record: EffectRecord) -> Confirmed | NotHappened:
        if target is not None and performed(target.parent)[record.key]:
            return Confirmed({"reconciled": True})
        return NotHappened()

    ctx.effect_sync(name, perform=perform, reconcile=reconcile)


def make_handlers(attempts: AttemptLog) -> tuple[Any, Any]:
    async def ordered(ctx: JobContext, key: str) -> None:
        """One job of an ordering key: the database records when it was claimed and finished."""
        with attempts.running(ctx):
            pass

    def effect(ctx: JobContext) -> None:
        """One external call through the effect ledger, reconciled from the effects files."""
        with attempts.running(ctx):
            external_call(ctx, "soak", {"token": ctx.token})

    return ordered, effect


async def checks(
    conn: AsyncConnection[Any], schema: str, effect_task: str, run_dir: Path | None
) -> list[Check]:
    queries = SoakQueries(schema)
    order = await queries.ordering_violations(conn)
    ledger = await queries.effect_states(conn, effect_task)
    performed_calls = performed(run_dir) if run_dir is not None else Counter()
    repeated = sum(1 for n in performed_calls.values() if n > 1)
    undone = sum(r["jobs"] for r in ledger if r["job_state"] == "succeeded" and r["effect_state"] != "done")
    return [
        Check(
            "a key's jobs ran one at a time, in order",
            order["not_succeeded"] == 0 and order["out_of_order"] == 0,
            f"{order['keyed']} jobs over {order['keys']} keys: {order['out_of_order']} out of order, "
            f"{order['not_succeeded']} not succeeded",
        ),
        Check(
            "no effect performed twice",
            repeated == 0 and undone == 0,
            f"{sum(performed_calls.values())} calls for {len(performed_calls)} effects, {repeated} repeated; "
            f"{undone} succeeded jobs without a done effect",
        ),
    ]

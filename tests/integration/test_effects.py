"""The effect ledger: a done effect is never performed again, an intent left by an earlier
attempt is reconciled before the effect may run again, intents are fenced, and operators list and
resolve uncertain effects from the CLI."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from psycopg import AsyncConnection

import tenure
from tenure import Backoff, Confirmed, JobContext, NotHappened, RetryLater, WorkerOptions
from tenure.db.control_queries import ControlQueries
from tenure.db.effects_queries import EffectQueries
from tenure.db.queries import Queries
from tenure.ops.cli import main

FAST = Backoff(base=0.01, cap=0.02, jitter=0.0)


async def run_until_settled(app: tenure.Tenure, dsn: str, job_id: int) -> dict[str, Any]:
    """Runs a worker until the job is succeeded or dead; returns its row."""
    worker = app.worker(WorkerOptions(poll_interval=0.02, concurrency=2))
    task = asyncio.create_task(worker.run())
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as db:
            for _ in range(500):
                cur = await db.execute(
                    "SELECT state::text, attempt_count, last_error_code, last_error"
                    " FROM tenure.jobs WHERE id = %s",
                    (job_id,),
                )
                row = await cur.fetchone()
                assert row is not None
                if row[0] in ("succeeded", "dead"):
                    return dict(zip(("state", "attempts", "code", "error"), row, strict=True))
                await asyncio.sleep(0.02)
        raise AssertionError(f"job {job_id} did not settle")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


async def effects_of(db: AsyncConnection[Any], job_id: int) -> list[tuple[Any, ...]]:
    cur = await db.execute(
        "SELECT name, state, token, outcome, resolved_by FROM tenure.job_effects"
        " WHERE job_id = %s ORDER BY id",
        (job_id,),
    )
    return await cur.fetchall()


async def test_a_done_effect_is_not_performed_again_on_retry(dsn: str, db: AsyncConnection[Any]) -> None:
    """Attempt 1 performs the effect then fails; attempt 2 gets the recorded outcome, no second call."""
    app = tenure.Tenure(dsn)
    calls: list[str] = []

    @app.task(name="fx.charge", backoff=FAST)
    async def charge(ctx: JobContext) -> None:
        async def perform(key: str) -> dict[str, str]:
            calls.append(key)
            return {"charge": f"ch_{len(calls)}"}

        outcome = await ctx.effect("charge", perform=perform)
        assert outcome == {"charge": "ch_1"}
        if ctx.attempt == 1:
            raise tenure.Transient("the step after the charge failed")

    job = await app.enqueue("fx.charge")
    final = await run_until_settled(app, dsn, job.id)
    await app.close()
    assert (final["state"], final["attempts"]) == ("succeeded", 2)
    assert len(calls) == 1 and calls[0] == str(uuid.uuid5(job.idempotency_key, "charge"))
    assert await effects_of(db, job.id) == [("charge", "done", 1, {"charge": "ch_1"}, None)]


@pytest.mark.parametrize(
    ("verdict", "performed", "outcome"),
    [
        (Confirmed({"found": True}), 1, {"found": True}),
        (NotHappened(), 2, {"call": 2}),
    ],
)
async def test_an_intent_left_behind_is_reconciled_before_the_effect_runs_again(
    dsn: str, db: AsyncConnection[Any], verdict: Any, performed: int, outcome: Any
) -> None:
    """An attempt that raised mid-call leaves an intent; the retry reconciles it: confirmed returns the
    outcome without a call, not-happened performs the call once more."""
    app = tenure.Tenure(dsn)
    calls: list[int] = []
    verdicts: list[str] = []

    @app.task(name="fx.send", backoff=FAST)
    def send(ctx: JobContext) -> None:
        def perform(key: str) -> dict[str, int]:
            calls.append(ctx.attempt)
            if ctx.attempt == 1:
                raise ConnectionError("timed out after sending: did it arrive?")
            return {"call": len(calls)}

        def reconcile(record: tenure.EffectRecord) -> Any:
            verdicts.append(record.key)
            return verdict

        assert ctx.effect_sync("mail", perform=perform, reconcile=reconcile) == outcome

    job = await app.enqueue("fx.send")
    final = await run_until_settled(app, dsn, job.id)
    await app.close()
    assert final["state"] == "succeeded", final
    assert len(calls) == performed and len(verdicts) == 1
    [(name, state, _, recorded, resolved_by)] = await effects_of(db, job.id)
    assert (name, state, recorded) == ("mail", "done", outcome)
    assert resolved_by is not None  # the reconciling worker is on record


async def test_retry_later_from_the_hook_retries_without_performing(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """RetryLater keeps the effect uncertain and retries the job; the effect is not performed."""
    app = tenure.Tenure(dsn)
    calls: list[int] = []

    @app.task(name="fx.later", backoff=FAST, max_attempts=3)
    def later(ctx: JobContext) -> None:
        def perform(key: str) -> None:
            calls.append(ctx.attempt)
            raise ConnectionError("lost the reply")

        ctx.effect_sync("hook", perform=perform, reconcile=lambda record: RetryLater(delay=0.01))

    job = await app.enqueue("fx.later")
    final = await run_until_settled(app, dsn, job.id)
    await app.close()
    assert final["state"] == "dead" and final["code"] == "EFFECT_RECONCILE_LATER"
    assert calls == [1]
    assert [r[1] for r in await effects_of(db, job.id)] == ["uncertain"]


async def test_without_a_hook_the_job_dies_uncertain_and_an_operator_resolves_it(
    dsn: str, db: AsyncConnection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """No reconcile hook: EFFECT_UNCERTAIN, listed by `effects list --uncertain`; resolved not-happened
    and reprocessed, the effect is performed and the job succeeds."""
    app = tenure.Tenure(dsn)
    calls: list[int] = []

    @app.task(name="fx.webhook", backoff=FAST)
    def webhook(ctx: JobContext) -> None:
        def perform(key: str) -> str:
            calls.append(ctx.attempt)
            if ctx.attempt == 1:
                raise TimeoutError("no reply")
            return "delivered"

        ctx.effect_sync("post", perform=perform)

    job = await app.enqueue("fx.webhook")
    final = await run_until_settled(app, dsn, job.id)
    assert (final["state"], final["code"]) == ("dead", "EFFECT_UNCERTAIN")
    assert "tenure effects resolve" in final["error"]
    assert calls == [1]

    capsys.readouterr()
    assert await asyncio.to_thread(main, ["effects", "list", "--uncertain", "--dsn", dsn, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["job_id"], listed["name"], listed["state"]) == (job.id, "post", "uncertain")

    resolve = ["effects", "resolve", str(listed["id"]), "--not-happened", "--reason", "checked: no delivery"]
    assert await asyncio.to_thread(main, [*resolve, "--dsn", dsn, "--json"]) == 0
    assert await asyncio.to_thread(main, [*resolve, "--dsn", dsn]) == 1  # not uncertain any more
    retried = await ControlQueries("tenure").retry_many(
        db, [job.id], attempts=1, actor="op", reason="resolved"
    )
    assert [r.id for r in retried.moved] == [job.id]
    final = await run_until_settled(app, dsn, job.id)
    await app.close()
    assert final["state"] == "succeeded"
    assert calls == [1, 3]  # attempt 2 refused to guess; attempt 3 ran after the operator's verdict
    [(_, state, _, outcome, _)] = await effects_of(db, job.id)
    assert (state, outcome) == ("done", "delivered")


async def test_only_the_lease_holder_can_record_an_intent(db: AsyncConnection[Any], queries: Queries) -> None:
    """An intent under a stale token or another owner is refused and writes nothing."""
    [job] = await queries.job_insert_many(db, [tenure.JobSpec(task="t")])
    [claimed] = await queries.job_claim(
        db, queue="default", owner="w1", limit=1, default_lease_seconds=30, default_runtime_seconds=60
    )
    ledger = EffectQueries("tenure")
    assert await ledger.begin(db, job_id=job.id, name="x", owner="w2", token=claimed.lease.token) is None
    assert await ledger.begin(db, job_id=job.id, name="x", owner="w1", token=0) is None
    assert await effects_of(db, job.id) == []
    step = await ledger.begin(db, job_id=job.id, name="x", owner="w1", token=claimed.lease.token)
    assert step is not None and step.action == "perform"

"""External side effects a retry must not repeat.

Prefer a destination that takes an idempotency key: pass `ctx.idempotency_key` (one per job)
or `ctx.step_key("charge")` (one per step) and let the destination deduplicate retries.

For destinations without one, `ctx.effect(name, perform=..., reconcile=...)` keeps a ledger
row per (job, effect name):

* before the call, a fenced *intent* (only the current lease holder can record it);
* after it, *done* with the outcome, which every later attempt gets back without calling again;
* an intent that outlives its attempt (the worker crashed, or the call raised) means the call
  may or may not have happened: the next attempt marks it *uncertain* and asks the
  application's `reconcile` hook, which looks at the destination and answers `Confirmed(outcome)`,
  `NotHappened()` (perform now) or `RetryLater()`. Without a hook the job fails with
  EFFECT_UNCERTAIN and an operator decides (`tenure effects list --uncertain`,
  `tenure effects resolve ID --confirmed|--not-happened --reason ...`).

An uncertain effect is never performed again until someone has decided that it did not happen.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tenure.db.effects_queries import EffectQueries, EffectStep
from tenure.handler.job_services import JobServices
from tenure.model.errors import LeaseLost, Permanent, Transient, ValidationError


class EffectContext(Protocol):
    """What the ledger needs of a running job's context (tenure.JobContext is one): its fence,
    its keys, and the check that stops a job whose lease is gone."""

    @property
    def job_id(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def idempotency_key(self) -> uuid.UUID: ...
    def step_key(self, step: str) -> str: ...
    def check(self) -> None: ...
    def check_in_time(self) -> None: ...
    def mark_lost(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """What a reconcile hook gets: which effect to look for at the destination."""

    job_id: int
    name: str
    key: str
    """`ctx.step_key(name)`: the key `perform` was given, so the destination can be asked for it."""


@dataclass(frozen=True, slots=True)
class Confirmed:
    """The reconcile hook's verdict: the call happened; `outcome` becomes the recorded outcome."""

    outcome: Any = None


@dataclass(frozen=True, slots=True)
class NotHappened:
    """The reconcile hook's verdict: the call did not happen; perform it now."""


@dataclass(frozen=True, slots=True)
class RetryLater:
    """The reconcile hook's verdict: the destination cannot tell yet; retry the job later."""

    delay: float | None = None


Verdict = Confirmed | NotHappened | RetryLater
Perform = Callable[[str], Any]
Reconcile = Callable[[EffectRecord], Verdict | Awaitable[Verdict]]


class EffectUncertain(Permanent):
    """An earlier attempt may have performed the effect and nothing reconciled it."""

    def __init__(self, job_id: int, name: str) -> None:
        super().__init__(
            f"effect {name!r} of job {job_id} is uncertain: an earlier attempt recorded its intent "
            "and never its outcome. Pass reconcile= to ctx.effect, or check the destination and run "
            "`tenure effects resolve <effect id> --confirmed|--not-happened --reason ...`, "
            f"then `tenure dead reprocess {job_id}`",
            code="EFFECT_UNCERTAIN",
        )


def check_effect_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise ValidationError(f"effect name {name!r} is invalid: give a string of 1 to 200 characters")
    return name


class EffectRunner:
    """Drives one effect of one attempt through the ledger."""

    def __init__(self, ctx: EffectContext, services: JobServices, name: str) -> None:
        self.ctx = ctx
        self.services = services
        self.name = check_effect_name(name)
        self.queries = EffectQueries(services.queries.schema)
        self.record = EffectRecord(ctx.job_id, name, ctx.step_key(name))

    def _lost(self) -> LeaseLost:
        self.ctx.mark_lost("fence refused the effect intent")
        return LeaseLost(self.ctx.job_id, self.ctx.token, "fence refused the effect intent")

    async def begin(self) -> EffectStep:
        self.ctx.check()
        async with self.services.pool.connection() as conn:
            step = await self.queries.begin(
                conn, job_id=self.ctx.job_id, name=self.name, owner=self.services.owner, token=self.ctx.token
            )
        if step is None:
            raise self._lost()
        return step

    async def done(self, outcome: Any) -> None:
        async with self.services.pool.connection() as conn:
            await self.queries.done(
                conn, job_id=self.ctx.job_id, name=self.name, token=self.ctx.token, outcome=outcome
            )

    async def settle(self, verdict: object) -> Any:
        """Records the reconcile verdict. Returns the confirmed outcome, or None to perform now."""
        if isinstance(verdict, RetryLater):
            raise Transient(
                f"effect {self.name!r} is uncertain and its destination cannot tell yet",
                code="EFFECT_RECONCILE_LATER",
                delay=verdict.delay,
            )
        if isinstance(verdict, Confirmed):
            state, outcome = "done", verdict.outcome
        elif isinstance(verdict, NotHappened):
            state, outcome = "intent", None
        else:
            raise Permanent(
                f"the reconcile hook of effect {self.name!r} returned {verdict!r}; "
                "return Confirmed(outcome), NotHappened() or RetryLater()",
                code="EFFECT_BAD_VERDICT",
            )
        self.ctx.check()
        async with self.services.pool.connection() as conn:
            held = await self.queries.reconciled(
                conn,
                job_id=self.ctx.job_id,
                name=self.name,
                owner=self.services.owner,
                token=self.ctx.token,
                state=state,
                outcome=outcome,
            )
        if not held:
            raise self._lost()
        return verdict


async def run_effect(
    ctx: EffectContext, services: JobServices, name: str, perform: Perform, reconcile: Reconcile | None
) -> Any:
    runner = EffectRunner(ctx, services, name)
    step = await runner.begin()
    if step.action == "done":
        return step.outcome
    if step.action == "uncertain":
        if reconcile is None:
            raise EffectUncertain(ctx.job_id, name)
        verdict = reconcile(runner.record)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        settled = await runner.settle(verdict)
        if isinstance(settled, Confirmed):
            return settled.outcome
    ctx.check_in_time()  # a lease lost since the intent, or run out by now, stops the call here
    outcome = perform(runner.record.key)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    await runner.done(outcome)
    return outcome


def run_effect_sync(
    ctx: EffectContext, services: JobServices, name: str, perform: Perform, reconcile: Reconcile | None
) -> Any:
    """`run_effect` for plain-function handlers: ledger writes on the worker's loop, calls here."""

    def on_loop(coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, services.loop).result()  # type: ignore[arg-type]

    runner = EffectRunner(ctx, services, name)
    step: EffectStep = on_loop(runner.begin())
    if step.action == "done":
        return step.outcome
    if step.action == "uncertain":
        if reconcile is None:
            raise EffectUncertain(ctx.job_id, name)
        verdict = reconcile(runner.record)
        if inspect.isawaitable(verdict):
            raise ValidationError(
                "effect_sync needs a plain reconcile function; use ctx.effect in async handlers"
            )
        settled = on_loop(runner.settle(verdict))
        if isinstance(settled, Confirmed):
            return settled.outcome
    ctx.check_in_time()
    outcome = perform(runner.record.key)
    if inspect.isawaitable(outcome):
        raise ValidationError("effect_sync needs a plain perform function; use ctx.effect in async handlers")
    on_loop(runner.done(outcome))
    return outcome

"""Workflows, model-checked: Hypothesis enqueues random small DAGs and drives the real SQL (claim,
fenced completion by the holder or a stale writer, failure to dead, lease expiry, reprocess,
cancelling a step's job or the whole workflow, signals, deadlines and the sweep for steps with a
condition) with an injected clock, and compares every step's state, dependency count, job, inputs,
condition wait and the signal mailbox with a Python model after every step."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tenure.db.control_queries import ControlQueries
from tenure.db.queries import Queries
from tenure.db.wait_queries import WaitQueries
from tenure.db.workflow_queries import WorkflowQueries

SCHEMA = "tenure"
QUEUE = "wf"
# A day ahead of the real clock: every job enqueued (at the real time) is due, and a signal kept
# for its 7 days (counted by the real clock, as signal() does) is still kept at the model's times.
EPOCH = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
LEASE = 2.0
EXAMPLES = int(os.environ.get("TENURE_MODEL_EXAMPLES", "200"))
LIVE = {"scheduled", "pending", "running"}
#: A step's condition: (what a signal to its key does, seconds, what its deadline does); None for
#: no key or no deadline. Each lets the step run one way or the other, as enqueue_workflow() requires.
CONDITIONS: list[tuple[str | None, float | None, str | None] | None] = [
    None,
    None,
    ("resume", None, None),
    ("resume", 2.0, "cancel"),
    ("skip", 2.0, "resume"),
    ("cancel", 2.0, "resume"),
    (None, 1.0, "resume"),
    ("resume", 1.0, "skip"),
]


@dataclass(frozen=True)
class Job:
    state: str = "pending"
    attempts: int = 0
    max_attempts: int = 2
    token: int = 0
    owner: str | None = None
    expires_at: datetime | None = None

    def live(self, now: datetime) -> bool:
        return self.state == "running" and self.expires_at is not None and self.expires_at > now


@dataclass
class Wait:
    """A released step's condition: its key (None: a time alone), what each ending does, and how it
    ended ('waiting' until then)."""

    key: str | None
    on_signal: str | None
    on_deadline: str | None
    state: str = "waiting"


@dataclass
class Step:
    name: str
    after: list[str]
    job_id: int
    state: str = "waiting"
    remaining: int = 0
    result: Any = None
    inputs: list[Any] | None = None
    condition: dict[str, Any] | None = None


@dataclass
class Flow:
    id: int
    on_dead: str
    steps: dict[str, Step] = field(default_factory=dict)
    cancelled: bool = False

    def children(self, name: str) -> list[str]:
        return sorted(s.name for s in self.steps.values() if name in s.after)

    def after_it(self, name: str) -> list[str]:
        seen: set[str] = set()
        todo = self.children(name)
        while todo:
            child = todo.pop()
            if child not in seen:
                seen.add(child)
                todo += self.children(child)
        return sorted(seen)


dags = st.integers(2, 5).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(1, n - 1), st.integers(0, n - 2)), max_size=2 * n),
        st.sampled_from(["hold", "cancel"]),
        st.lists(st.sampled_from(CONDITIONS), min_size=n, max_size=n),
    )
)


class WorkflowMachine(RuleBasedStateMachine):
    def __init__(self, loop: asyncio.AbstractEventLoop, conn: psycopg.AsyncConnection[Any]) -> None:
        super().__init__()
        self.loop, self.conn = loop, conn
        self.q, self.c, self.w = Queries(SCHEMA), ControlQueries(SCHEMA), WorkflowQueries(SCHEMA)
        self.now = EPOCH
        self.flows: dict[int, Flow] = {}
        self.jobs: dict[int, Job] = {}
        self.step_of: dict[int, tuple[int, str]] = {}
        #: The condition waits of released steps, by job id, and the signals kept per key.
        self.waits: dict[int, Wait] = {}
        self.mailbox: dict[str, int] = {}
        self.keys: list[str] = []
        self.run(self._reset())

    #: Set on a machine whose session defers workflow work to the pass past this many steps.
    settle = False
    #: A step's input bound in bytes, on a machine whose session sets it (None: the 32 MiB default,
    #: which these small results never reach).
    max_input: int | None = None

    def run(self, coro: Any) -> Any:
        result = self.loop.run_until_complete(coro)
        if self.settle:
            self.loop.run_until_complete(self._pass_until_idle())
        return result

    async def _pass_until_idle(self) -> None:
        """The workflow pass, chunk by chunk, until the work the last statement left is done."""
        while await self.q.workflow_work_run(self.conn, chunk=2) is not None:
            pass

    async def _reset(self) -> None:
        for table in ("job_events", "workflows", "signals", "jobs"):
            await self.conn.execute(f"DELETE FROM {SCHEMA}.{table}")

    def _pick(self, data: st.DataObject, states: set[str]) -> int | None:
        ids = sorted(i for i, j in self.jobs.items() if j.state in states)
        return data.draw(st.sampled_from(ids)) if ids else None

    # -- the model's rules: what the trigger must do ----------------------------------------

    def _release(self, flow: Flow, step: Step) -> None:
        inputs = [flow.steps[p].result for p in step.after]
        # A skipped step stores no result (SQL NULL, not JSON null): it weighs nothing.
        weight = sum(len(json.dumps(r)) for r in inputs if r is not None)
        if self.max_input is not None and weight > self.max_input:
            # Its input over its bound: held with the reason, never a job, and what follows held.
            step.state = "held"
            for name in flow.after_it(step.name):
                if flow.steps[name].state in ("waiting", "held"):
                    flow.steps[name].state = "held" if flow.on_dead == "hold" else "cancelled"
            return
        step.state = "released"
        step.inputs = inputs
        if step.condition is None:
            self.jobs[step.job_id] = Job()
            return
        # Its job waits on its condition; a kept signal that runs it is delivered at once, one
        # that would skip or cancel it is left to the sweep.
        c = step.condition
        self.jobs[step.job_id] = Job(state="waiting")
        wait = Wait(c.get("key"), c.get("on_signal"), c.get("on_deadline"))
        self.waits[step.job_id] = wait
        if wait.key is not None and wait.on_signal == "resume" and self.mailbox.get(wait.key):
            self._deliver(step.job_id)

    def _deliver(self, job_id: int) -> None:
        """The oldest signal kept for the job's key is delivered to it."""
        wait = self.waits[job_id]
        assert wait.key is not None
        self.mailbox[wait.key] -= 1
        self._wake(job_id, "signalled")

    def _wake(self, job_id: int, outcome: str) -> None:
        """The job's condition ends as `outcome`, and the job moves as the condition says."""
        wait = self.waits[job_id]
        wait.state = outcome
        ending = wait.on_signal if outcome == "signalled" else wait.on_deadline
        job = self.jobs[job_id]
        target = {"resume": "pending", "skip": "succeeded", "cancel": "cancelled"}[ending or "resume"]
        self.jobs[job_id] = replace(job, state=target)
        self._job_moved(job_id, "waiting", target, None)

    def _succeeded(self, flow: Flow, step: Step, result: Any) -> None:
        step.state, step.result = "succeeded", result
        for name in flow.children(step.name):
            child = flow.steps[name]
            child.remaining -= 1
            if child.remaining == 0 and child.state == "waiting":
                self._release(flow, child)

    def _ended(self, flow: Flow, step: Step, state: str) -> None:
        step.state = state
        after = "held" if state == "dead" and flow.on_dead == "hold" else "cancelled"
        for name in flow.after_it(step.name):
            if flow.steps[name].state in ("waiting", "held"):
                flow.steps[name].state = after

    def _back(self, flow: Flow, step: Step) -> None:
        step.state = "released"
        for name in flow.after_it(step.name):
            s = flow.steps[name]
            if s.state == "held" or (s.state == "cancelled" and not flow.cancelled):
                s.state = "waiting"

    def _job_moved(self, job_id: int, before: str, after: str, result: Any = None) -> None:
        flow_id, name = self.step_of[job_id]
        flow, step = self.flows[flow_id], self.flows[flow_id].steps[name]
        if after == "succeeded":
            self._succeeded(flow, step, result)
        elif after in ("dead", "cancelled"):
            self._ended(flow, step, after)
        elif before in ("dead", "cancelled"):
            self._back(flow, step)

    # -- producers and operators ----------------------------------------------------------------

    @rule(dag=dags)
    def enqueue(self, dag: tuple[int, list[tuple[int, int]], str]) -> None:
        """A workflow of n steps; step i may wait for any earlier step."""
        n, edges, on_dead, conditions = dag
        after: dict[int, list[int]] = {i: [] for i in range(n)}
        for child, parent in edges:
            if parent < child and parent not in after[child]:
                after[child].append(parent)
        made: list[dict[str, Any] | None] = []
        for drawn in conditions:
            if drawn is None:
                made.append(None)
                continue
            on_signal, seconds, on_deadline = drawn
            condition: dict[str, Any] = {}
            if on_signal is not None:
                key = f"k{len(self.keys)}"
                self.keys.append(key)
                condition.update(key=key, on_signal=on_signal)
            if seconds is not None:
                condition.update(seconds=seconds, on_deadline=on_deadline)
            made.append(condition)
        steps = [
            {"name": f"s{i}", "task": "m.step", "queue": QUEUE, "max_attempts": 2, "payload": {},
             "after": [f"s{p}" for p in after[i]],
             "input_arg": "inputs" if after[i] else None, "input_kind": "list" if after[i] else None,
             "condition": made[i]}
            for i in range(n)
        ]  # fmt: skip

        async def write() -> Any:
            async with self.conn.transaction():
                return await self.w.enqueue(self.conn, name="model", on_dead=on_dead, steps=steps)

        run = self.run(write())
        flow = Flow(run.id, on_dead)
        for i in range(n):
            step = Step(
                f"s{i}",
                [f"s{p}" for p in after[i]],
                run.jobs[f"s{i}"],
                remaining=len(after[i]),
                condition=made[i],
            )
            flow.steps[step.name] = step
            self.step_of[step.job_id] = (run.id, step.name)
            if not step.after:
                self._release(flow, step)
        self.flows[run.id] = flow

    @rule(data=st.data())
    def cancel_step_job(self, data: st.DataObject) -> None:
        job_id = self._pick(data, LIVE | {"dead", "waiting"})
        if job_id is None:
            return
        job = self.jobs[job_id]
        rows = self.run(
            self.c.cancel_many(self.conn, [job_id], max_jobs=1, actor="m", reason="model", now=self.now)
        )
        assert [r.id for r in rows.moved] == [job_id]
        bump = 1 if job.state == "running" else 0
        self.jobs[job_id] = replace(
            job, state="cancelled", token=job.token + bump, owner=None, expires_at=None
        )
        if job.state == "waiting":
            self.waits[job_id].state = "cancelled"  # the cancel ends its wait with it
        self._job_moved(job_id, job.state, "cancelled")

    @rule(data=st.data())
    def reprocess(self, data: st.DataObject) -> None:
        job_id = self._pick(data, {"dead", "cancelled"})
        if job_id is None:
            return
        job = self.jobs[job_id]
        rows = self.run(
            self.c.retry_many(self.conn, [job_id], attempts=1, actor="m", reason="model", now=self.now)
        )
        assert [r.id for r in rows.moved] == [job_id]
        self.jobs[job_id] = replace(job, state="pending", max_attempts=job.attempts + 1)
        self._job_moved(job_id, job.state, "pending")

    @rule(data=st.data())
    def cancel_workflow(self, data: st.DataObject) -> None:
        if not self.flows:
            return
        flow = self.flows[data.draw(st.sampled_from(sorted(self.flows)))]
        done = self.run(self.w.cancel(self.conn, flow.id, actor="m", reason="model", now=self.now))
        assert done is not None
        finished = all(s.state in ("succeeded", "dead", "cancelled") for s in flow.steps.values())
        if finished and not flow.cancelled:
            # Nothing left to run: the cancel is refused and changes nothing.
            assert (done.outcome, done.steps_cancelled, done.jobs_cancelled) == ("finished", 0, [])
            return
        # Cancelling again cancels what came back since (a step's job reprocessed by hand).
        assert done.outcome == ("already" if flow.cancelled else "cancelled")
        flow.cancelled = True
        waiting = [s for s in flow.steps.values() if s.state in ("waiting", "held")]
        assert done.steps_cancelled == (len(waiting) if done.outcome == "cancelled" else 0)
        for s in waiting:
            s.state = "cancelled"
        live = sorted(
            s.job_id
            for s in flow.steps.values()
            if s.state == "released" and self.jobs[s.job_id].state in LIVE | {"waiting"}
        )
        assert sorted(done.jobs_cancelled) == live
        for job_id in live:
            job = self.jobs[job_id]
            bump = 1 if job.state == "running" else 0
            self.jobs[job_id] = replace(
                job, state="cancelled", token=job.token + bump, owner=None, expires_at=None
            )
            if job.state == "waiting":
                self.waits[job_id].state = "cancelled"
            self._job_moved(job_id, job.state, "cancelled")

    # -- signals and deadlines, for the steps with a condition -----------------------------------

    @precondition(lambda self: bool(self.keys))
    @rule(data=st.data())
    def signal(self, data: st.DataObject) -> None:
        """A signal to a step's key wakes its job when it waits on it; otherwise it is kept."""
        key = data.draw(st.sampled_from(self.keys))

        async def send() -> tuple[str, int | None]:
            cur = await self.conn.execute(f"SELECT outcome, job_id FROM {SCHEMA}.signal(%s)", (key,))
            row = await cur.fetchone()
            assert row is not None
            return row[0], row[1]

        outcome, job_id = self.run(send())
        waiter = [
            i
            for i, w in self.waits.items()
            if w.key == key and w.state == "waiting" and self.jobs[i].state == "waiting"
        ]
        if waiter:
            assert (outcome, job_id) == ("delivered", waiter[0]), (outcome, job_id, waiter)
            self.mailbox[key] = self.mailbox.get(key, 0) + 1
            self._deliver(waiter[0])
        else:
            assert outcome == "kept", (outcome, job_id)
            self.mailbox[key] = self.mailbox.get(key, 0) + 1

    @rule()
    def sweep(self) -> None:
        """The recovery pass's sweep, until it delivers nothing: every waiting condition whose key
        has a kept signal gets one (those that skip or cancel are delivered here only)."""
        for _ in range(10):
            cur = self.run(self.conn.execute(f"SELECT delivered FROM {SCHEMA}.signals_sweep(100)"))
            row = self.run(cur.fetchone())
            if not row[0]:
                break
        while True:
            matched = sorted(
                i
                for i, w in self.waits.items()
                if w.state == "waiting"
                and self.jobs[i].state == "waiting"
                and w.key
                and self.mailbox.get(w.key)
            )
            if not matched:
                break
            self._deliver(matched[0])

    @rule()
    def deadlines(self) -> None:
        """The promotion pass's deadline part: every condition whose deadline passed ends as it
        says (run, skip, cancel)."""

        async def due() -> list[int]:
            cur = await self.conn.execute(
                f"SELECT job_id FROM {SCHEMA}.job_waits WHERE name = '@step' AND state = 'waiting'"
                f" AND deadline <= %s ORDER BY deadline, job_id",
                (self.now,),
            )
            return [r[0] for r in await cur.fetchall()]

        ending = self.run(due())
        ended = self.run(WaitQueries(SCHEMA).expire_due(self.conn, limit=100, now=self.now))
        assert ended.timed_out == len(ending)
        for job_id in ending:
            assert self.waits[job_id].state == "waiting" and self.jobs[job_id].state == "waiting"
            self._wake(job_id, "timed_out")

    @rule(seconds=st.sampled_from([1.0, 3.0]))
    def advance_and_recover(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        recovered = self.run(
            self.q.lease_recover_expired(
                self.conn, limit=100, backoff_base=0.0, backoff_cap=0.0, jitter=0.0, now=self.now
            )
        )
        due = {i for i, j in self.jobs.items() if j.state == "running" and not j.live(self.now)}
        assert {r.job_id for r in recovered} == due
        for i in sorted(due):
            j = self.jobs[i]
            state = "dead" if j.attempts >= j.max_attempts else "pending"
            self.jobs[i] = replace(j, state=state, owner=None, expires_at=None)
            self._job_moved(i, "running", state)

    # -- workers ----------------------------------------------------------------------------------

    @rule(limit=st.integers(1, 3), worker=st.sampled_from(["w1", "w2"]))
    def claim(self, limit: int, worker: str) -> None:
        self._claim(limit, worker)

    @rule(value=st.integers(0, 99))
    def run_one(self, value: int) -> None:
        """A worker claims one step and completes it at once: most steps then succeed, so their
        children are released (or held) often, not only when the random rules line up."""
        for job_id in self._claim(1, "w1"):
            self._complete(job_id, stale=False, value=value)

    def _claim(self, limit: int, worker: str) -> list[int]:
        claimed = self.run(
            self.q.job_claim(
                self.conn, queue=QUEUE, owner=worker, limit=limit, default_lease_seconds=LEASE,
                default_runtime_seconds=60.0, now=self.now,
            )
        )  # fmt: skip
        pending = sorted(i for i, j in self.jobs.items() if j.state == "pending")
        assert len(claimed) == min(limit, len(pending))
        for c in claimed:
            flow_id, name = self.step_of[c.id]
            step = self.flows[flow_id].steps[name]
            if step.after:
                assert c.payload == {"inputs": step.inputs}, (c.payload, step)
            j = self.jobs[c.id]
            expires = self.now + timedelta(seconds=LEASE)
            self.jobs[c.id] = replace(
                j,
                state="running",
                attempts=j.attempts + 1,
                token=j.token + 1,
                owner=worker,
                expires_at=expires,
            )
        return [c.id for c in claimed]

    @precondition(lambda self: any(j.token for j in self.jobs.values()))
    @rule(data=st.data(), stale=st.booleans(), value=st.integers(0, 99))
    def complete(self, data: st.DataObject, stale: bool, value: int) -> None:
        """The holder completes with a result; a stale writer (an older token) releases nothing."""
        job_id = self._pick(data, {"running", "pending", "cancelled", "dead"})
        if job_id is not None:  # the jobs with a token may all have succeeded (run_one)
            self._complete(job_id, stale, value)

    def _complete(self, job_id: int, stale: bool, value: int) -> None:
        job = self.jobs[job_id]
        if job.token == 0:
            return
        owner, token = job.owner or "w1", job.token - 1 if stale else job.token
        out = self.run(
            self.q.job_complete_many(
                self.conn, owner=owner, leases=[(job_id, token)], results={(job_id, token): Jsonb(value)},
                now=self.now,
            )
        )  # fmt: skip
        holds = not stale and job.live(self.now)
        assert out == {(job_id, token): "done" if holds else "lost"}, (job, stale)
        if holds:
            self.jobs[job_id] = replace(job, state="succeeded", owner=None, expires_at=None)
            self._job_moved(job_id, "running", "succeeded", value)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data())
    def fail_for_good(self, data: st.DataObject) -> None:
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        job = self.jobs[job_id]
        out = self.run(
            self.q.job_fail(
                self.conn, job_id=job_id, owner=job.owner or "w1", token=job.token, error_code="X",
                error="model", retry_delay=None, now=self.now,
            )
        )  # fmt: skip
        if not job.live(self.now):
            assert out.outcome == "lost"
            return
        assert out.outcome == "failed"
        self.jobs[job_id] = replace(job, state="dead", owner=None, expires_at=None)
        self._job_moved(job_id, "running", "dead")

    # -- after every step ----------------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        async def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            async with self.conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(
                    f"SELECT workflow_id, name, state, remaining, job_id, result FROM {SCHEMA}.workflow_steps"
                )
                steps = await cur.fetchall()
                await cur.execute(
                    f"SELECT id, state::text AS state, lease_token, workflow_id, workflow_step, payload"
                    f" FROM {SCHEMA}.jobs"
                )
                return steps, await cur.fetchall()

        steps, jobs = self.run(read())

        async def conditions() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
            cur = await self.conn.execute(
                f"SELECT job_id, state FROM {SCHEMA}.job_waits WHERE name = '@step'"
            )
            waits = await cur.fetchall()
            cur = await self.conn.execute(
                f"SELECT key, count(*) FROM {SCHEMA}.signals WHERE job_id IS NULL GROUP BY key"
            )
            return waits, await cur.fetchall()

        waits, kept = self.run(conditions())
        assert dict(waits) == {i: w.state for i, w in self.waits.items()}
        assert dict(kept) == {k: n for k, n in self.mailbox.items() if n}
        assert {r["id"] for r in jobs} == set(self.jobs), "a step's job appeared, or one was released twice"
        for r in jobs:
            j = self.jobs[r["id"]]
            assert (r["state"], r["lease_token"]) == (j.state, j.token), (r, j)
            assert self.step_of[r["id"]] == (r["workflow_id"], r["workflow_step"])
        assert len(steps) == sum(len(f.steps) for f in self.flows.values())
        for r in steps:
            s = self.flows[r["workflow_id"]].steps[r["name"]]
            assert (r["state"], r["remaining"], r["job_id"]) == (s.state, s.remaining, s.job_id), (r, s)
            done = sum(1 for p in s.after if self.flows[r["workflow_id"]].steps[p].state == "succeeded")
            assert r["remaining"] == len(s.after) - done, "the count is not the dependencies still to succeed"
            if s.state == "succeeded":
                assert r["result"] == s.result


def _check(dsn: str, machine: type[WorkflowMachine], *, session: str | None = None) -> None:
    """Runs `machine` against the model on one connection (`session`: a SET it starts with)."""
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(psycopg.AsyncConnection.connect(dsn, autocommit=True))
    if session is not None:
        loop.run_until_complete(conn.execute(session))
    try:
        run_state_machine_as_test(
            lambda: machine(loop, conn),
            settings=settings(
                max_examples=EXAMPLES // 2,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                database=None,
            ),
        )
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


@pytest.mark.slow
def test_workflow_state_machine_matches_model(dsn: str) -> None:
    """Random workflows under claims, fenced and stale completions, failures, expiries,
    reprocesses and cancels agree with the model at every step: a step is released exactly once,
    when its last dependency succeeds and not before, with every result; a stale writer releases
    nothing; a dead step holds or cancels what follows by policy and its reprocess resumes it."""
    _check(dsn, WorkflowMachine)


class DeferringWorkflowMachine(WorkflowMachine):
    settle = True


@pytest.mark.slow
def test_workflow_work_left_to_the_pass_ends_as_the_model_says(dsn: str) -> None:
    """The same random workflows with the inline limit at 1 step (work past it goes to the workflow
    pass, run in chunks of 2 after every statement): once the pass is done, every step's state,
    count, job and inputs agree with the model, as when everything is done inline."""
    _check(dsn, DeferringWorkflowMachine, session="SET tenure.workflow_inline_limit = 1")


class BoundedInputWorkflowMachine(WorkflowMachine):
    max_input = 1


@pytest.mark.slow
def test_an_input_over_its_bound_holds_its_step_as_the_model_says(dsn: str) -> None:
    """The same random workflows with a step's input bound at 4 bytes (results of 0 to 99 as JSON:
    two parents of two digits fit, three do not): a step whose parents' results pass the bound is
    held, never released, and the steps after it held or cancelled by policy, exactly as the model
    says, and nothing else in the statement that completed its last parent fails."""
    _check(dsn, BoundedInputWorkflowMachine, session="SET tenure.workflow_max_input_bytes = 1")

"""The lease state machine, model-checked: Hypothesis drives the real SQL with an injected clock
and compares every job row with a small Python model after every step. Jobs due later wait as
scheduled until a promotion makes them pending; the claim takes its oldest-first share, then by
priority, and only the tasks it names."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
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

from tenure.db.effects_queries import EffectQueries
from tenure.db.queries import Queries
from tenure.jobs import JobSpec

SCHEMA = "tenure"
QUEUE = "model"
WORKERS = ("w1", "w2", "w3")
TASKS = ("model.task", "model.other")
RUNTIME = 20.0  # max runtime per attempt: heartbeats can never push a lease past it
BACKOFF = 1.0  # recovery backoff (base = cap, no jitter): expired jobs come back 1s later
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
TERMINAL = {"succeeded", "dead", "cancelled"}
#: A job's progress before any heartbeat stored one (SQL NULL). The heartbeat's guard compares
#: markers as jsonb, so a JSON null marker counts as a move away from SQL NULL, once.
UNSET = object()


@dataclass(frozen=True)
class ModelJob:
    state: str = "pending"
    attempts: int = 0
    max_attempts: int = 1
    token: int = 0
    owner: str | None = None
    available_at: datetime = EPOCH
    expires_at: datetime | None = None
    deadline: datetime | None = None
    progress: Any = UNSET
    key: str | None = None
    priority: int = 0
    task: str = TASKS[0]

    def holds(self, owner: str, token: int, now: datetime) -> bool:
        """Whether a fenced write by (owner, token) at `now` must succeed."""
        return (
            self.state == "running"
            and self.owner == owner
            and self.token == token
            and self.expires_at is not None
            and self.expires_at > now
        )


def _released(job: ModelJob, **changes: Any) -> ModelJob:
    return replace(job, owner=None, expires_at=None, deadline=None, **changes)


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self, loop: asyncio.AbstractEventLoop, conn: psycopg.AsyncConnection[Any]) -> None:
        super().__init__()
        self.loop = loop
        self.conn = conn
        self.q = Queries(SCHEMA)
        self.now = EPOCH
        self.jobs: dict[int, ModelJob] = {}
        self.max_token_seen: dict[int, int] = {}
        self.ledger = EffectQueries(SCHEMA)
        self.effects: dict[int, tuple[str, int]] = {}
        self.performed: dict[int, int] = {}
        self.run(self._reset())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _reset(self) -> None:
        rows = await (
            await self.conn.execute(
                "SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables "
                "WHERE schemaname = %s AND tablename <> 'schema_migrations'",
                [SCHEMA],
            )
        ).fetchall()
        await self.conn.execute(f"TRUNCATE {', '.join(r[0] for r in rows)} RESTART IDENTITY CASCADE")

    async def _rows(self) -> dict[int, dict[str, Any]]:
        async with self.conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT id, state::text AS state, attempt_count, max_attempts, lease_token, lease_owner,"
                " available_at, lease_expires_at, lease_deadline, progress, finished_at"
                f" FROM {SCHEMA}.jobs ORDER BY id"
            )
            return {r["id"]: r for r in await cur.fetchall()}

    def _is_head(self, job_id: int) -> bool:
        """Per-key ordering (O2): nothing of its key running, nothing earlier waiting or dead."""
        key = self.jobs[job_id].key
        return key is None or not any(
            j.key == key
            and i != job_id
            and (j.state == "running" or (i < job_id and j.state in ("scheduled", "pending", "dead")))
            for i, j in self.jobs.items()
        )

    def _waiting(self, at: datetime) -> str:
        """A job that waits until `at`: scheduled while that is later than now, else pending."""
        return "scheduled" if at > self.now else "pending"

    async def _effect_rows(self) -> dict[int, tuple[str, int]]:
        query = f"SELECT job_id, state, token FROM {SCHEMA}.job_effects"
        rows = await (await self.conn.execute(query)).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def _pick(self, data: st.DataObject, states: set[str] | None = None) -> int | None:
        ids = sorted(i for i, j in self.jobs.items() if states is None or j.state in states)
        return data.draw(st.sampled_from(ids)) if ids else None

    # -- producers and operators ------------------------------------------------------------

    @rule(
        count=st.integers(1, 3),
        max_attempts=st.integers(1, 4),
        delay=st.sampled_from([None, 0.0, 1.5, 7.0]),
        key=st.sampled_from([None, None, "k1", "k2"]),
        priority=st.sampled_from([0, 0, 5]),
        task=st.sampled_from(TASKS),
    )
    def enqueue(
        self, count: int, max_attempts: int, delay: float | None, key: str | None, priority: int, task: str
    ) -> None:
        specs = [
            JobSpec(
                task=task,
                queue=QUEUE,
                delay=delay,
                max_attempts=max_attempts,
                ordering_key=key,
                priority=priority,
            )
            for _ in range(count)
        ]
        inserted = self.run(self.q.job_insert_many(self.conn, specs, now=self.now))
        assert len(inserted) == count
        for job in inserted:
            assert job.id not in self.jobs
            available = self.now + timedelta(seconds=delay or 0.0)
            assert job.available_at == available
            self.jobs[job.id] = ModelJob(
                state=self._waiting(available),
                max_attempts=max_attempts,
                available_at=available,
                key=key,
                priority=priority,
                task=task,
            )

    @rule(data=st.data(), budget=st.integers(1, 3))
    def reprocess(self, data: st.DataObject, budget: int) -> None:
        job_id = self._pick(data)
        if job_id is None:
            return
        job = self.jobs[job_id]
        moved = self.run(
            self.q.job_reprocess(
                self.conn, job_id, attempts=budget, actor="model", reason="test", now=self.now
            )
        )
        assert moved == (job.state in ("dead", "cancelled"))
        if moved:
            self.jobs[job_id] = replace(
                job, state="pending", max_attempts=job.attempts + budget, available_at=self.now
            )

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = self._pick(data)
        if job_id is None:
            return
        job = self.jobs[job_id]
        moved = self.run(self.q.job_cancel(self.conn, job_id, actor="model", reason="test", now=self.now))
        assert moved == (job.state in ("scheduled", "pending", "dead"))
        if moved:
            self.jobs[job_id] = replace(job, state="cancelled")

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 3.5, 8.0, 25.0]))
    def advance_time(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def promote(self) -> None:
        """Every scheduled job due by now becomes pending, keeping its run time."""
        result = self.run(self.q.job_promote_due(self.conn, limit=100, now=self.now))
        due = [i for i, j in self.jobs.items() if j.state == "scheduled" and j.available_at <= self.now]
        assert result.promoted == len(due)
        for i in due:
            self.jobs[i] = replace(self.jobs[i], state="pending")
        later = [j.available_at for j in self.jobs.values() if j.state == "scheduled"]
        assert result.next_due == (min(later) if later else None)

    # -- workers ------------------------------------------------------------------------------

    @rule(
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 3),
        lease=st.sampled_from([1.0, 3.0, 10.0]),
        oldest=st.integers(0, 3),
        tasks=st.sampled_from([None, TASKS[:1], TASKS]),
    )
    def claim(
        self, worker: str, limit: int, lease: float, oldest: int, tasks: tuple[str, ...] | None
    ) -> None:
        claimable = [
            i
            for i, j in self.jobs.items()
            if j.state == "pending"
            and j.available_at <= self.now
            and self._is_head(i)
            and (tasks is None or j.task in tasks)
        ]
        # The oldest-first share, then the best by priority among the rest.
        by_age = sorted(claimable, key=lambda i: (self.jobs[i].available_at, i))[: min(oldest, limit)]
        rest = [i for i in claimable if i not in by_age]
        by_priority = sorted(rest, key=lambda i: (-self.jobs[i].priority, self.jobs[i].available_at, i))
        expected = sorted(by_age + by_priority[: limit - len(by_age)])
        claimed = self.run(
            self.q.job_claim(
                self.conn,
                queue=QUEUE,
                owner=worker,
                limit=limit,
                default_lease_seconds=lease,
                default_runtime_seconds=RUNTIME,
                tasks=tasks,
                oldest=oldest,
                now=self.now,
            )
        )
        assert [c.id for c in claimed] == expected
        for c in claimed:
            job = self.jobs[c.id]
            self.jobs[c.id] = replace(
                job,
                state="running",
                attempts=job.attempts + 1,
                token=job.token + 1,
                owner=worker,
                expires_at=self.now + timedelta(seconds=min(lease, RUNTIME)),
                deadline=self.now + timedelta(seconds=RUNTIME),
            )
            assert c.lease.token == job.token + 1 and c.attempt == job.attempts + 1

    def _writer(self, data: st.DataObject, job_id: int) -> tuple[str, int]:
        """Who writes: mostly the holder, sometimes a stale token or another worker."""
        job = self.jobs[job_id]
        who = data.draw(st.sampled_from(["holder", "holder", "stale_token", "other_worker"]))
        owner = job.owner or WORKERS[0]
        if who == "stale_token":
            return owner, job.token - data.draw(st.integers(1, 2))
        if who == "other_worker":
            return data.draw(st.sampled_from([w for w in WORKERS if w != owner])), job.token
        return owner, job.token

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), moved=st.booleans(), lease=st.sampled_from([1.0, 5.0, 30.0]))
    def heartbeat(self, data: st.DataObject, moved: bool, lease: float) -> None:
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        job = self.jobs[job_id]
        owner, token = self._writer(data, job_id)
        marker = (
            {"step": self.now.timestamp()} if moved else (None if job.progress is UNSET else job.progress)
        )
        renewed = self.run(
            self.q.lease_extend_many(
                self.conn, owner=owner, renewals=[(job_id, token, marker, lease)], now=self.now
            )
        )
        expected = (
            job.holds(owner, token, self.now)
            and job.deadline is not None
            and job.deadline > self.now
            and (job.progress is UNSET or marker != job.progress)
        )
        assert bool(renewed) == expected, (job, owner, token, marker)
        if expected:
            assert job.deadline is not None
            expires = min(self.now + timedelta(seconds=lease), job.deadline)
            assert renewed[0].expires_at == expires
            self.jobs[job_id] = replace(job, expires_at=expires, progress=marker)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        job = self.jobs[job_id]
        owner, token = self._writer(data, job_id)
        result = self.run(
            self.q.job_complete_many(self.conn, owner=owner, leases=[(job_id, token)], now=self.now)
        )
        assert result == {(job_id, token): "done" if job.holds(owner, token, self.now) else "lost"}
        if result[(job_id, token)] == "done":
            self.jobs[job_id] = _released(job, state="succeeded")

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(
        data=st.data(),
        retry_delay=st.sampled_from([None, 0.0, 2.0]),
        code=st.sampled_from(["TRANSIENT", "PERMANENT", "UNKNOWN"]),
    )
    def fail(self, data: st.DataObject, retry_delay: float | None, code: str) -> None:
        """Each error class reaches SQL as a retry delay (transient, unknown within budget) or None."""
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        job = self.jobs[job_id]
        owner, token = self._writer(data, job_id)
        delay = None if code == "PERMANENT" else retry_delay
        outcome = self.run(
            self.q.job_fail(
                self.conn,
                job_id=job_id,
                owner=owner,
                token=token,
                error_code=code,
                error="model failure",
                retry_delay=delay,
                now=self.now,
            )
        )
        if not job.holds(owner, token, self.now):
            assert (outcome.outcome, outcome.state) == ("lost", None)
            return
        assert outcome.outcome == "failed" and outcome.state is not None
        if delay is not None and job.attempts < job.max_attempts:
            available = self.now + timedelta(seconds=delay)
            waiting = self._waiting(available)
            assert (outcome.state.value, outcome.available_at) == (waiting, available)
            self.jobs[job_id] = _released(job, state=waiting, available_at=available)
        else:
            assert outcome.state.value == "dead"
            self.jobs[job_id] = _released(job, state="dead")

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), finish=st.booleans())
    def effect(self, data: st.DataObject, finish: bool) -> None:
        """An attempt records an effect's intent (fenced) and maybe its outcome; an intent that an
        earlier attempt left behind becomes uncertain and is never performed again by itself."""
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        job = self.jobs[job_id]
        owner, token = self._writer(data, job_id)
        step = self.run(
            self.ledger.begin(self.conn, job_id=job_id, name="fx", owner=owner, token=token, now=self.now)
        )
        if not job.holds(owner, token, self.now):
            assert step is None
            return
        assert step is not None
        prior = self.effects.get(job_id)
        action = {None: "perform", "intent": "uncertain", "uncertain": "uncertain", "done": "done"}[
            prior[0] if prior else None
        ]
        assert step.action == action, (job_id, prior, step)
        if action == "perform":
            self.effects[job_id] = ("intent", token)
            self.performed[job_id] = self.performed.get(job_id, 0) + 1
            if finish:
                assert self.run(
                    self.ledger.done(self.conn, job_id=job_id, name="fx", token=token, outcome={"t": token})
                )
                self.effects[job_id] = ("done", token)
        elif action == "uncertain":
            assert prior is not None
            self.effects[job_id] = ("uncertain", prior[1])

    @rule()
    def recover(self) -> None:
        recovered = self.run(
            self.q.lease_recover_expired(
                self.conn, limit=100, backoff_base=BACKOFF, backoff_cap=BACKOFF, jitter=0.0, now=self.now
            )
        )
        due = {
            i
            for i, j in self.jobs.items()
            if j.state == "running" and j.expires_at is not None and j.expires_at <= self.now
        }
        assert {r.job_id for r in recovered} == due
        for r in recovered:
            job = self.jobs[r.job_id]
            assert (r.previous_owner, r.token) == (job.owner, job.token)
            if job.attempts >= job.max_attempts:
                self.jobs[r.job_id] = _released(job, state="dead")
            else:
                later = self.now + timedelta(seconds=BACKOFF)
                self.jobs[r.job_id] = _released(job, state=self._waiting(later), available_at=later)
            assert r.state.value == self.jobs[r.job_id].state

    # -- after every step ----------------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        rows = self.run(self._rows())
        assert set(rows) == set(self.jobs), "a job appeared or disappeared"
        for job_id, job in self.jobs.items():
            row = rows[job_id]
            seen = (
                row["state"],
                row["attempt_count"],
                row["max_attempts"],
                row["lease_token"],
                row["lease_owner"],
            )
            assert seen == (job.state, job.attempts, job.max_attempts, job.token, job.owner), (
                job_id,
                row,
                job,
            )
            assert row["lease_expires_at"] == job.expires_at and row["lease_deadline"] == job.deadline
            if job.state in ("scheduled", "pending"):
                assert row["available_at"] == job.available_at
            # Tokens only grow; attempts never exceed the budget; terminal rows carry finished_at.
            assert row["lease_token"] >= self.max_token_seen.get(job_id, 0)
            self.max_token_seen[job_id] = row["lease_token"]
            assert row["attempt_count"] <= row["max_attempts"]
            assert (row["finished_at"] is not None) == (job.state in TERMINAL)
            # At most one live lease: only a running job has an owner, and it has exactly one.
            assert (row["lease_owner"] is not None) == (job.state == "running")
        # Per-key ordering: never two running jobs of one key (the claim rule checks the order).
        running_keys = [j.key for j in self.jobs.values() if j.state == "running" and j.key is not None]
        assert len(running_keys) == len(set(running_keys)), running_keys
        ledger = self.run(self._effect_rows())
        assert ledger == self.effects
        assert all(n == 1 for n in self.performed.values()), "an effect was performed twice"


@pytest.mark.slow
def test_lease_state_machine_matches_model(dsn: str) -> None:
    """Hundreds of random operation sequences on the real SQL agree with the model at every step:
    one live lease per job, growing tokens, inert stale writes, sticky terminal states, bounded
    attempts, nothing lost."""
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(psycopg.AsyncConnection.connect(dsn, autocommit=True))
    try:
        run_state_machine_as_test(
            lambda: LeaseMachine(loop, conn),
            settings=settings(
                max_examples=300,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                database=None,
            ),
        )
    finally:
        loop.run_until_complete(conn.close())
        loop.close()

"""Job control, unique jobs, limits, waits and signals, model-checked: Hypothesis drives the real
SQL (cancel and revoke, requeue, retry, the dead-job reprocess, pause, snooze, results, unique
enqueue, the limited claim, a wait, a signal, a deadline, an operator's end of a wait) with an
injected clock and compares every job row, wait and signal with a Python model after every
step."""

from __future__ import annotations

import asyncio
import os
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
from psycopg.types.json import Jsonb

from tenure.db.control_queries import ControlQueries
from tenure.db.ops_queries import OpsQueries
from tenure.db.queries import Queries
from tenure.db.wait_queries import WaitQueries
from tenure.model.jobs import JobSpec
from tenure.model.unique import Unique

SCHEMA = "tenure"
LIMITED, FREE = "limited", "free"  # LIMITED may run LIMIT jobs at once; FREE may be paused
LIMIT = 2
MAX_SNOOZES = 2
EPOCH = datetime(2031, 1, 1, tzinfo=UTC)
ACTIVE = {"scheduled", "pending", "running", "waiting"}
SIGNAL_KEYS = ["k1", "k2"]
EXAMPLES = int(os.environ.get("TENURE_MODEL_EXAMPLES", "200"))


@dataclass(frozen=True)
class M:
    queue: str
    state: str = "pending"
    attempts: int = 0
    max_attempts: int = 3
    token: int = 0
    owner: str | None = None
    available_at: datetime = EPOCH
    expires_at: datetime | None = None
    snoozes: int = 0
    key: str | None = None
    result: Any = None
    #: The wait going on (state waiting): its name, the signal key (None: a sleep), its deadline.
    wait: tuple[str, str | None, datetime | None] | None = None
    #: How each wait the job began ended, by name: 'signalled' (with the signal id), 'timed_out',
    #: 'ended' or 'cancelled'.
    waits_ended: tuple[tuple[str, str, int | None], ...] = ()

    def live(self, now: datetime) -> bool:
        return self.state == "running" and self.expires_at is not None and self.expires_at > now


class ControlMachine(RuleBasedStateMachine):
    def __init__(self, loop: asyncio.AbstractEventLoop, conn: psycopg.AsyncConnection[Any]) -> None:
        super().__init__()
        self.loop, self.conn = loop, conn
        self.q, self.c, self.ops = Queries(SCHEMA), ControlQueries(SCHEMA), OpsQueries(SCHEMA)
        self.w = WaitQueries(SCHEMA)
        #: Signals by id: their key, idempotency key, and the job each was delivered to (None: kept).
        self.signals: dict[int, tuple[str, str | None, int | None]] = {}
        #: When each waiting job began to wait, by the injected clock: signals go to the longest
        #: waiting, and between waits begun at one instant, to the lowest job id.
        self.since: dict[int, datetime] = {}
        self.now = EPOCH
        self.jobs: dict[int, M] = {}
        self.paused = False
        self.tokens: dict[int, int] = {}
        self.run(self._reset())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _reset(self) -> None:
        tables = ("job_events", "job_effects", "job_waits", "signals", "queue_pauses", "queue_events")
        for table in (*tables, "queue_limits", "jobs"):
            await self.conn.execute(f"DELETE FROM {SCHEMA}.{table}")
        await self.conn.execute(
            f"INSERT INTO {SCHEMA}.queue_limits (queue, max_running, declared_by) VALUES (%s, %s, 'model')",
            (LIMITED, LIMIT),
        )

    def _pick(self, data: st.DataObject, states: set[str] | None = None) -> int | None:
        ids = sorted(i for i, j in self.jobs.items() if states is None or j.state in states)
        return data.draw(st.sampled_from(ids)) if ids else None

    def _waiting(self, at: datetime) -> str:
        return "scheduled" if at > self.now else "pending"

    def _holder(self, key: str) -> int | None:
        return next((i for i, j in self.jobs.items() if j.key == key and j.state in ACTIVE), None)

    # -- producers and operators ------------------------------------------------------------

    @rule(
        queue=st.sampled_from([LIMITED, FREE]),
        key=st.sampled_from([None, None, "u1", "u2"]),
        delay=st.sampled_from([0.0, 0.0, 3.0]),
        count=st.integers(1, 3),
    )
    def enqueue(self, queue: str, key: str | None, delay: float, count: int) -> None:
        """Enqueues `count` jobs one by one; a held unique key returns its holder instead."""
        spec = JobSpec(
            task="m.t",
            queue=queue,
            delay=delay,
            max_attempts=3,
            unique=None if key is None else Unique(key=key),
        )
        full = None if key is None else f"m.t:{key}"
        for _ in range(count):
            [job] = self.run(self.q.job_insert_many(self.conn, [spec], now=self.now))
            holder = None if full is None else self._holder(full)
            if holder is not None:
                assert (job.existing, job.id) == (True, holder), "a unique key got a second job"
                continue
            assert not job.existing and job.id not in self.jobs
            at = self.now + timedelta(seconds=delay)
            self.jobs[job.id] = M(queue, state=self._waiting(at), available_at=at, key=full)

    @rule(data=st.data(), requeue=st.booleans())
    def cancel(self, data: st.DataObject, requeue: bool) -> None:
        """Cancel (revoke when running) or requeue one job: all or nothing."""
        job_id = self._pick(data)
        if job_id is None:
            return
        job = self.jobs[job_id]
        rows = self.run(
            self.c.cancel_many(
                self.conn, [job_id], requeue=requeue, max_jobs=1, actor="m", reason="model", now=self.now
            )
        )
        allowed = {"running"} if requeue else {"scheduled", "pending", "running", "waiting", "dead"}
        if job.state not in allowed:
            assert [r.id for r in rows.refused] == [job_id] and not rows.moved
            return
        assert [r.id for r in rows.moved] == [job_id] and not rows.refused
        bump = 1 if job.state == "running" else 0
        if requeue:
            self.jobs[job_id] = replace(
                job,
                state="pending",
                attempts=job.attempts - 1,
                token=job.token + bump,
                owner=None,
                expires_at=None,
                available_at=self.now,
            )
        else:
            ended = job.waits_ended
            if job.wait is not None:  # the cancel ends the wait with the job
                ended = (*ended, (job.wait[0], "cancelled", None))
            self.jobs[job_id] = replace(
                job,
                state="cancelled",
                token=job.token + bump,
                owner=None,
                expires_at=None,
                wait=None,
                waits_ended=ended,
            )

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        job_id = self._pick(data)
        if job_id is None:
            return
        job = self.jobs[job_id]
        comes_back = job.state in ("dead", "cancelled")
        conflict = comes_back and job.key is not None and self._holder(job.key) is not None
        try:
            rows = self.run(
                self.c.retry_many(self.conn, [job_id], attempts=1, actor="m", reason="model", now=self.now)
            )
        except psycopg.errors.UniqueViolation:
            assert conflict, "a retry was refused for a key nobody else holds"
            return
        assert not conflict, "a retry brought back a job whose unique key another job holds"
        if job.state not in ("scheduled", "pending", "dead", "cancelled"):
            assert [r.id for r in rows.refused] == [job_id] and not rows.moved
            return
        assert [r.id for r in rows.moved] == [job_id]
        budget = job.attempts + 1 if comes_back else job.max_attempts
        self.jobs[job_id] = replace(job, state="pending", available_at=self.now, max_attempts=budget)

    @rule(data=st.data())
    def dead_reprocess(self, data: st.DataObject) -> None:
        """The dead-job workflow (`tenure dead reprocess`, the dead-jobs page): a dead job comes
        back pending with a fresh budget, unless another job holds its unique key now; any other
        job is left as it is."""
        job_id = self._pick(data, {"dead"} if data.draw(st.booleans()) else None)
        job_id = job_id if job_id is not None else self._pick(data)
        if job_id is None:
            return
        job = self.jobs[job_id]
        dead = job.state == "dead"
        conflict = dead and job.key is not None and self._holder(job.key) is not None
        try:
            moved = self.run(
                self.ops.dead_reprocess_many(
                    self.conn, ids=[job_id], limit=1, attempts=1, actor="m", reason="model", now=self.now
                )
            )
        except psycopg.errors.UniqueViolation:
            assert conflict, "a reprocess was refused for a key nobody else holds"
            return
        assert not conflict, "a reprocess brought back a job whose unique key another job holds"
        assert moved == ([job_id] if dead else []), (job, moved)
        if dead:
            self.jobs[job_id] = replace(
                job, state="pending", available_at=self.now, max_attempts=job.attempts + 1
            )

    @rule(pause=st.booleans())
    def pause_or_resume(self, pause: bool) -> None:
        if pause:
            row = self.run(
                self.c.pause(
                    self.conn, FREE, until=None, actor="m", reason="model", allow_unknown=True, now=self.now
                )
            )
            assert row.known
            self.paused = True
        else:
            row = self.run(self.c.resume(self.conn, FREE, actor="m", reason=None, now=self.now))
            assert (row is not None) == self.paused
            self.paused = False

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 6.0]))
    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def promote_and_recover(self) -> None:
        self.run(self.q.job_promote_due(self.conn, limit=100, now=self.now))
        for i, j in self.jobs.items():
            if j.state == "scheduled" and j.available_at <= self.now:
                self.jobs[i] = replace(j, state="pending")
        expired = self.run(self.w.expire_due(self.conn, limit=100, now=self.now))
        due_waits = [
            i
            for i, j in self.jobs.items()
            if j.state == "waiting" and j.wait is not None and j.wait[2] is not None and j.wait[2] <= self.now
        ]
        assert expired.timed_out == len(due_waits)
        for i in due_waits:
            self._wake(i, "timed_out", None)
        recovered = self.run(
            self.q.lease_recover_expired(
                self.conn, limit=100, backoff_base=0.0, backoff_cap=0.0, jitter=0.0, now=self.now
            )
        )
        due = {i for i, j in self.jobs.items() if j.state == "running" and not j.live(self.now)}
        assert {r.job_id for r in recovered} == due
        for i in due:
            j = self.jobs[i]
            state = "dead" if j.attempts >= j.max_attempts else "pending"
            self.jobs[i] = replace(j, state=state, owner=None, expires_at=None, available_at=self.now)

    # -- workers ------------------------------------------------------------------------------

    @rule(
        queue=st.sampled_from([LIMITED, FREE]),
        limit=st.integers(1, 3),
        lease=st.sampled_from([2.0, 5.0]),
        worker=st.sampled_from(["w1", "w2"]),
        plain=st.booleans(),
    )
    def claim(self, queue: str, limit: int, lease: float, worker: str, plain: bool) -> None:
        limited = queue == LIMITED and not plain
        claimed = self.run(
            self.q.job_claim(
                self.conn,
                queue=queue,
                owner=worker,
                limit=limit,
                default_lease_seconds=lease,
                default_runtime_seconds=60.0,
                limited=limited,
                now=self.now,
            )
        )
        due = sorted(
            (j.available_at, i)
            for i, j in self.jobs.items()
            if j.queue == queue and j.state == "pending" and j.available_at <= self.now
        )
        if queue == LIMITED:
            room = LIMIT - sum(1 for j in self.jobs.values() if j.queue == LIMITED and j.live(self.now))
            take = 0 if plain else max(0, min(limit, room))  # the plain claim takes nothing from it
        else:
            take = 0 if self.paused else limit
        expected = sorted(i for _, i in due[:take])
        assert sorted(c.id for c in claimed) == expected, (queue, plain, self.paused)
        for c in claimed:
            j = self.jobs[c.id]
            self.jobs[c.id] = replace(
                j,
                state="running",
                attempts=j.attempts + 1,
                token=j.token + 1,
                owner=worker,
                expires_at=self.now + timedelta(seconds=lease),
            )

    def _writer(self, data: st.DataObject, job: M) -> tuple[str, int]:
        who = data.draw(st.sampled_from(["holder", "holder", "stale", "other"]))
        owner = job.owner or "w1"
        if who == "stale":
            return owner, job.token - 1
        if who == "other":
            return ("w2" if owner == "w1" else "w1"), job.token
        return owner, job.token

    def _holds(self, job: M, owner: str, token: int) -> bool:
        return job.live(self.now) and job.owner == owner and job.token == token

    @precondition(
        lambda self: any(
            j.state in ("running", "cancelled", "pending") and j.token for j in self.jobs.values()
        )
    )
    @rule(data=st.data(), value=st.sampled_from([None, 7, {"ok": True}]))
    def complete(self, data: st.DataObject, value: Any) -> None:
        """The holder completes with a result; a revoked or stale holder is refused."""
        job_id = self._pick(data, {"running", "cancelled", "pending"})
        assert job_id is not None
        job = self.jobs[job_id]
        owner, token = self._writer(data, job)
        out = self.run(
            self.q.job_complete_many(
                self.conn,
                owner=owner,
                leases=[(job_id, token)],
                results={(job_id, token): Jsonb(value)},
                now=self.now,
            )
        )
        holds = self._holds(job, owner, token)
        assert out == {(job_id, token): "done" if holds else "lost"}, (job, owner, token)
        if holds:
            self.jobs[job_id] = replace(job, state="succeeded", owner=None, expires_at=None, result=value)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), delay=st.sampled_from([0.0, 2.0]))
    def snooze(self, data: st.DataObject, delay: float) -> None:
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        job = self.jobs[job_id]
        owner, token = self._writer(data, job)
        out = self.run(
            self.q.job_snooze(
                self.conn,
                job_id=job_id,
                owner=owner,
                token=token,
                delay=delay,
                max_snoozes=MAX_SNOOZES,
                now=self.now,
            )
        )
        if not self._holds(job, owner, token):
            assert out.outcome == "lost"
            return
        assert out.outcome == "snoozed"
        if job.snoozes >= MAX_SNOOZES:
            self.jobs[job_id] = replace(job, state="dead", owner=None, expires_at=None)
        else:
            at = self.now + timedelta(seconds=delay)
            self.jobs[job_id] = replace(
                job,
                state=self._waiting(at),
                attempts=job.attempts - 1,
                snoozes=job.snoozes + 1,
                owner=None,
                expires_at=None,
                available_at=at,
            )
        assert out.state is not None and out.state.value == self.jobs[job_id].state

    # -- waits and signals ------------------------------------------------------------------------

    def _wake(self, job_id: int, how: str, signal_id: int | None) -> None:
        """A waiting job's wait ended `how`: it is pending again, due at once (the database sets
        its due time by its own clock, read back: the model's clock is years ahead of it)."""
        job = self.jobs[job_id]
        assert job.wait is not None
        due = self.run(self._available_at(job_id))
        self.jobs[job_id] = replace(
            job,
            state="pending",
            available_at=due,
            wait=None,
            waits_ended=(*job.waits_ended, (job.wait[0], how, signal_id)),
        )
        self.since.pop(job_id, None)

    async def _available_at(self, job_id: int) -> datetime:
        cur = await self.conn.execute(f"SELECT available_at FROM {SCHEMA}.jobs WHERE id = %s", (job_id,))
        row = await cur.fetchone()
        assert row is not None and row[0] <= self.now
        return row[0]  # type: ignore[no-any-return]

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(
        data=st.data(),
        key=st.sampled_from([*SIGNAL_KEYS, None]),
        timeout=st.sampled_from([None, 2.0, 5.0]),
    )
    def wait(self, data: st.DataObject, key: str | None, timeout: float | None) -> None:
        """The holder waits for a signal (or sleeps): a wait it began before and that ended
        answers how; a kept signal is taken at once; else the job waits, attempt not counted. A
        revoked or stale holder is refused."""
        job_id = self._pick(data, {"running"})
        assert job_id is not None
        owner, token = self._writer(data, self.jobs[job_id])
        self._wait(job_id, owner, token, key, timeout)

    @rule(key=st.sampled_from([*SIGNAL_KEYS, None]), timeout=st.sampled_from([None, 2.0, 5.0]))
    def claim_and_wait(self, key: str | None, timeout: float | None) -> None:
        """A job is enqueued, a worker claims one of its queue and that job's handler waits at
        once: the common path, so that waiters meet signals, deadlines and operators often."""
        self.enqueue(FREE, None, 0.0, 1)
        before = {i for i, j in self.jobs.items() if j.state == "running"}
        self.claim(FREE, 1, 5.0, "w1", True)
        for job_id in sorted(i for i, j in self.jobs.items() if j.state == "running"):
            if job_id not in before:
                job = self.jobs[job_id]
                self._wait(job_id, job.owner or "w1", job.token, key, timeout)

    def _wait(self, job_id: int, owner: str, token: int, key: str | None, timeout: float | None) -> None:
        job = self.jobs[job_id]
        name = key or "sleep"
        timeout = 3.0 if key is None and timeout is None else timeout
        step = self.run(
            self.w.job_wait(
                self.conn, job_id=job_id, owner=owner, token=token, name=name, key=key, timeout=timeout,
                now=self.now,
            )
        )  # fmt: skip
        earlier = next((e for e in job.waits_ended if e[0] == name and e[1] != "cancelled"), None)
        if earlier is not None:
            assert (step.outcome, step.state, step.signal_id) == ("resolved", earlier[1], earlier[2])
            return
        if not self._holds(job, owner, token):
            assert step.outcome == "lost", (step, job)
            return
        kept = sorted(i for i, (k, _, to) in self.signals.items() if k == key and to is None)
        if kept:
            assert (step.outcome, step.signal_id) == ("signalled", kept[0]), (step, kept)
            k, idem, _ = self.signals[kept[0]]
            self.signals[kept[0]] = (k, idem, job_id)
            # A wait of this name that a cancel ended earlier (the job was brought back) is begun
            # again: its row now says how this one ended.
            others = tuple(e for e in job.waits_ended if e[0] != name)
            self.jobs[job_id] = replace(job, waits_ended=(*others, (name, "signalled", kept[0])))
            return
        assert step.outcome == "waiting", (step, job)
        deadline = None if timeout is None else self.now + timedelta(seconds=timeout)
        self.since[job_id] = self.now
        self.jobs[job_id] = replace(
            job,
            state="waiting",
            attempts=job.attempts - 1,
            owner=None,
            expires_at=None,
            wait=(name, key, deadline),
            waits_ended=tuple(e for e in job.waits_ended if e[0] != name),
        )

    @rule(key=st.sampled_from(SIGNAL_KEYS), idempotency=st.sampled_from([None, "a", "b"]))
    def signal(self, key: str, idempotency: str | None) -> None:
        """A signal wakes the longest waiter of its key, or is kept; a repeated idempotency key
        writes nothing."""
        sent = self.run(
            self.w.signal(
                self.conn, key=key, payload_json="1", idempotency_key=idempotency, keep_seconds=3600
            )
        )
        earlier = next(
            (
                i
                for i, (k, idem, _) in self.signals.items()
                if idempotency and (k, idem) == (key, idempotency)
            ),
            None,
        )
        if earlier is not None:
            assert (sent.outcome, sent.signal_id, sent.job_id) == (
                "duplicate",
                earlier,
                self.signals[earlier][2],
            )
            return
        assert sent.signal_id not in self.signals
        waiters = sorted(
            (self.since[i], i)
            for i, j in self.jobs.items()
            if j.state == "waiting" and j.wait is not None and j.wait[1] == key
        )
        if not waiters:
            assert (sent.outcome, sent.job_id) == ("kept", None)
            self.signals[sent.signal_id] = (key, idempotency, None)
            return
        woken = waiters[0][1]
        assert (sent.outcome, sent.job_id) == ("delivered", woken), (sent, waiters)
        self.signals[sent.signal_id] = (key, idempotency, woken)
        self._wake(woken, "signalled", sent.signal_id)

    @rule(data=st.data())
    def end_wait(self, data: st.DataObject) -> None:
        """An operator ends a job's wait: only a waiting job's, which runs again at once."""
        job_id = self._pick(data)
        if job_id is None:
            return
        name = self.run(self.w.end_wait(self.conn, job_id=job_id, actor="m", reason="model", now=self.now))
        job = self.jobs[job_id]
        if job.state != "waiting":
            assert name is None
            return
        assert job.wait is not None and name == job.wait[0]
        self._wake(job_id, "ended", None)

    # -- after every step ----------------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        async def rows() -> dict[int, dict[str, Any]]:
            async with self.conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(
                    f"SELECT id, state::text AS state, attempt_count, max_attempts, lease_token, lease_owner,"
                    f" lease_expires_at, snoozes, unique_key, result FROM {SCHEMA}.jobs"
                )
                return {r["id"]: r for r in await cur.fetchall()}

        found = self.run(rows())
        assert set(found) == set(self.jobs), "a job appeared or disappeared"
        for i, j in self.jobs.items():
            r = found[i]
            seen = (
                r["state"],
                r["attempt_count"],
                r["max_attempts"],
                r["lease_token"],
                r["lease_owner"],
                r["lease_expires_at"],
                r["snoozes"],
                r["unique_key"],
            )
            assert seen == (
                j.state,
                j.attempts,
                j.max_attempts,
                j.token,
                j.owner,
                j.expires_at,
                j.snoozes,
                j.key,
            ), (i, r, j)
            assert r["result"] == j.result if j.state == "succeeded" else r["result"] is None
            assert r["lease_token"] >= self.tokens.get(i, 0), "a token went back"
            self.tokens[i] = r["lease_token"]

        async def waits() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
            cur = await self.conn.execute(
                f"SELECT job_id, name, key, state, deadline, signal_id FROM {SCHEMA}.job_waits"
            )
            found = await cur.fetchall()
            cur = await self.conn.execute(f"SELECT id, key, idempotency_key, job_id FROM {SCHEMA}.signals")
            return found, await cur.fetchall()

        wait_rows, signal_rows = self.run(waits())
        expected_waits = {
            (i, j.wait[0], j.wait[1], "waiting", j.wait[2], None) for i, j in self.jobs.items() if j.wait
        } | {(i, name, how, sid) for i, j in self.jobs.items() for name, how, sid in j.waits_ended}
        seen_waits = {r if r[3] == "waiting" else (r[0], r[1], r[3], r[5]) for r in wait_rows}
        assert seen_waits == expected_waits, (seen_waits, expected_waits)
        assert {(i, k, idem, to) for i, (k, idem, to) in self.signals.items()} == set(signal_rows)
        delivered = [to for _, _, to in self.signals.values() if to is not None]
        for j in self.jobs.values():
            if j.state == "waiting":
                assert j.owner is None and j.expires_at is None, "a waiting job holds a lease"
        assert all(
            sum(1 for k, how, sid in j.waits_ended if sid is not None) == delivered.count(i)
            for i, j in self.jobs.items()
        ), "a signal was delivered to two jobs, or lost"
        live = sum(1 for j in self.jobs.values() if j.queue == LIMITED and j.live(self.now))
        assert live <= LIMIT, f"{live} live leases in a queue limited to {LIMIT}"
        keys = [j.key for j in self.jobs.values() if j.key is not None and j.state in ACTIVE]
        assert len(keys) == len(set(keys)), "two jobs hold one unique key"


@pytest.mark.slow
def test_control_state_machine_matches_model(dsn: str) -> None:
    """Random sequences of cancel, revoke, requeue, retry, dead-job reprocess, pause, snooze,
    results, unique enqueues, limited claims, waits, signals, deadlines and ended waits agree with
    the model at every step: a revoked or stale holder writes nothing, a paused or limited queue
    gives out no more than it may, a unique key has one holder (waiting jobs hold theirs), tokens
    only grow, a signal wakes one waiter once or is kept, and a wait ends exactly one way."""
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(psycopg.AsyncConnection.connect(dsn, autocommit=True))
    try:
        run_state_machine_as_test(
            lambda: ControlMachine(loop, conn),
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                database=None,
            ),
        )
    finally:
        loop.run_until_complete(conn.close())
        loop.close()

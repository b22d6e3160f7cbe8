"""The lease state machine, model-checked: Hypothesis drives the real SQL with an injected clock
and compares every job row, the audit log and the effect ledger with a small Python model after
every step. Jobs due later wait as scheduled until a promotion makes them pending; the claim takes
its oldest-first share, then by priority, and only the tasks it names. Besides the autocommit
connection, an operator's connection holds a row lock now and then, and two workers' connections
claim and complete in explicit transactions that commit or roll back in any order: rows locked
elsewhere are skipped (or answered 'busy'), and nothing uncommitted is visible to anyone else.
Operators act through the statements the product runs for them (the control and dead-job
queries behind Client.cancel and Client.retry, the CLI and the dashboard)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row

from tenure.db import producer_queries
from tenure.db.control_queries import ControlQueries
from tenure.db.control_rows import CancelFilter, SkippedJob
from tenure.db.effects_queries import EffectQueries
from tenure.db.offer_queries import OfferQueries
from tenure.db.ops_queries import OpsQueries
from tenure.db.ops_rows import DeadFilter
from tenure.db.ordering_queries import OrderingQueries
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec
from tenure.producer.control import check_cancel

SCHEMA = "tenure"
QUEUE = "model"
WORKERS = ("w1", "w2", "w3")
TASKS = ("model.task", "model.other")
RUNTIME = 20.0  # max runtime per attempt: heartbeats can never push a lease past it
BACKOFF = 1.0  # recovery backoff (base = cap, no jitter): expired jobs come back 1s later
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
TERMINAL = {"succeeded", "dead", "cancelled"}
EFFECT = "fx"
#: A job's progress before any heartbeat stored one (SQL NULL). The heartbeat's guard compares
#: markers as jsonb, so a JSON null marker counts as a move away from SQL NULL, once.
UNSET = object()
#: Two workers' connections that claim and complete in explicit transactions.
TRANSACTIONS = ("A", "B")
#: How long the autocommit connection waits for a row lock before giving up: the statements that
#: must wait (operators' FOR UPDATE, a fresh effect row's foreign-key check) fail fast instead of
#: hanging a single-threaded test, and one that waits unexpectedly fails the run.
MAIN_LOCK_TIMEOUT = "20ms"
#: The other connections never have to wait; this only turns a surprise into an error.
SIDE_LOCK_TIMEOUT = "2s"
#: CI's budget; a longer hunt raises them (and needs pytest's --timeout=0 past five minutes).
EXAMPLES = int(os.environ.get("TENURE_MODEL_EXAMPLES", "300"))
STEPS = int(os.environ.get("TENURE_MODEL_STEPS", "30"))

#: What the holder of a revoked lease may still try to write.
REVOKED_WRITES = ("complete", "fail", "heartbeat", "release", "effect")
#: One job_insert_many batch: count, max attempts, delay, ordering key, priority, task.
BATCHES = st.tuples(
    st.integers(1, 3),
    st.integers(1, 4),
    st.sampled_from([None, 0.0, 1.5, 7.0]),
    st.sampled_from([None, None, "k1", "k2"]),
    st.sampled_from([0, 0, 5]),
    st.sampled_from(TASKS),
)
#: One audit-log row: job id, event, from state, to state, token, worker, error code.
Event = tuple[int, str, str | None, str | None, int, str | None, str | None]


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
    finished_at: datetime | None = None
    error_code: str | None = None
    #: Who held the latest lease: stale writers of a finished job write as it.
    last_owner: str | None = None
    #: Claims and releases so far: a released attempt is not counted (attempts = their difference).
    claims: int = 0
    releases: int = 0

    def holds(self, owner: str, token: int, now: datetime, at_deadline: bool = False) -> bool:
        """Whether the fence of a write by (owner, token) at `now` holds. A failure written because
        the max runtime ended the attempt may also land once the deadline has passed."""
        return (
            self.state == "running"
            and self.owner == owner
            and self.token == token
            and self.expires_at is not None
            and (
                self.expires_at > now or (at_deadline and self.deadline is not None and self.deadline <= now)
            )
        )


@dataclass
class ModelOffer:
    """A worker's standing offer of a slot (docs/hand-off.md)."""

    tasks: tuple[str, ...]
    lease: float
    until: datetime
    slots: int = 1


def _released(job: ModelJob, **changes: Any) -> ModelJob:
    return replace(job, owner=None, expires_at=None, deadline=None, **changes)


@dataclass
class Transaction:
    """An explicit transaction on its own connection: the rows it wrote (so holds locked), as it
    sees them, and the events it logged; others see neither until it commits."""

    conn: psycopg.AsyncConnection[Any]
    rows: dict[int, ModelJob] = field(default_factory=dict)
    events: list[tuple[int, Event]] = field(default_factory=list)
    open: bool = False


class LeaseMachine(RuleBasedStateMachine):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        conn: psycopg.AsyncConnection[Any],
        locker: psycopg.AsyncConnection[Any],
        workers: dict[str, psycopg.AsyncConnection[Any]],
    ) -> None:
        super().__init__()
        self.loop = loop
        self.conn = conn
        self.locker = locker
        self.q = Queries(SCHEMA)
        self.ordering = OrderingQueries(SCHEMA)
        self.control = ControlQueries(SCHEMA)
        self.ops = OpsQueries(SCHEMA)
        self.ledger = EffectQueries(SCHEMA)
        self.offer_q = OfferQueries(SCHEMA)
        self.offers: dict[str, ModelOffer] = {}
        self.now = EPOCH
        self.jobs: dict[int, ModelJob] = {}
        self.max_token_seen: dict[int, int] = {}
        self.last_states: dict[int, str] = {}
        self.reprocessed: set[int] = set()
        #: The latest revoked lease of each job: its holder may not have heard, and still writes.
        self.revoked: dict[int, tuple[str, int]] = {}
        self.effects: dict[int, tuple[str, int]] = {}
        self.effect_ids: dict[int, int] = {}
        #: Performances of each job's effect not since declared never to have happened.
        self.performed: dict[int, int] = {}
        self.events: list[tuple[int, Event]] = []
        self.event_seq = 0
        self.locked_row: int | None = None
        self.txns = {name: Transaction(c) for name, c in workers.items()}
        self.run(self._reset())

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    async def _reset(self) -> None:
        for side in (self.locker, *(t.conn for t in self.txns.values())):
            await side.rollback()
        tables = await (
            await self.conn.execute(
                "SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables "
                "WHERE schemaname = %s AND tablename <> 'schema_migrations'",
                [SCHEMA],
            )
        ).fetchall()
        # DELETE, not TRUNCATE: a TRUNCATE gives each table and index a new file (80 ms for the
        # schema's tables, a third of an example), a DELETE of a few dozen rows a few ms. Foreign
        # keys are not checked meanwhile (replica role), so the order of the tables does not
        # matter; the sequences start again, as TRUNCATE ... RESTART IDENTITY had them.
        async with self.conn.transaction():
            # Autovacuum may hold the tables for a moment; only the reset may wait for it.
            await self.conn.execute("SET LOCAL lock_timeout = '30s'")
            await self.conn.execute("SET LOCAL session_replication_role = replica")
            # One round trip for every table, not one each.
            await self.conn.execute("".join(f"DELETE FROM {table};" for (table,) in tables))
            await self.conn.execute(
                "SELECT setval(format('%%I.%%I', schemaname, sequencename), start_value, false)"
                " FROM pg_sequences WHERE schemaname = %s",
                [SCHEMA],
            )

    def teardown(self) -> None:
        # Open transactions would hold their locks into the next example (and block its truncate).
        self.run(self._rollback_all())

    async def _rollback_all(self) -> None:
        for side in (self.locker, *(t.conn for t in self.txns.values())):
            await side.rollback()

    async def _rows(self, conn: psycopg.AsyncConnection[Any]) -> dict[int, dict[str, Any]]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT id, state::text AS state, attempt_count, max_attempts, lease_token, lease_owner,"
                " available_at, lease_expires_at, lease_deadline, progress, progress IS NULL AS unset,"
                " finished_at, last_error_code"
                f" FROM {SCHEMA}.jobs ORDER BY id"
            )
            return {r["id"]: r for r in await cur.fetchall()}

    async def _event_rows(self) -> list[Event]:
        query = (
            "SELECT job_id, event, from_state::text, to_state::text, token, worker, error_code"
            f" FROM {SCHEMA}.job_events ORDER BY id"
        )
        return [tuple(r) for r in await (await self.conn.execute(query)).fetchall()]

    async def _effect_rows(self) -> dict[int, tuple[int, str, int]]:
        query = f"SELECT job_id, id, state, token FROM {SCHEMA}.job_effects"
        rows = await (await self.conn.execute(query)).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    # -- model helpers --------------------------------------------------------------------------

    def _is_head(self, view: dict[int, ModelJob], job_id: int) -> bool:
        """Per-key ordering: nothing of its key running, nothing earlier waiting or dead."""
        key = view[job_id].key
        return key is None or not any(
            j.key == key
            and i != job_id
            and (j.state == "running" or (i < job_id and j.state in ("scheduled", "pending", "dead")))
            for i, j in view.items()
        )

    def _waiting(self, at: datetime) -> str:
        """A job that waits until `at`: scheduled while that is later than now, else pending."""
        return "scheduled" if at > self.now else "pending"

    def _finished(self, job: ModelJob, state: str, **changes: Any) -> ModelJob:
        return _released(job, state=state, finished_at=self.now, **changes)

    def _locked_by_others(self, me: str | None = None) -> set[int]:
        """Rows locked by every connection but `me` (None: the autocommit connection)."""
        locked = {self.locked_row} if self.locked_row is not None else set()
        for name, txn in self.txns.items():
            if name != me:
                locked |= set(txn.rows)
        return locked

    def _log(self, sink: list[tuple[int, Event]], event: Event) -> None:
        self.event_seq += 1
        sink.append((self.event_seq, event))

    def _pick(self, data: st.DataObject, states: set[str] | None = None) -> int | None:
        ids = sorted(i for i, j in self.jobs.items() if states is None or j.state in states)
        return data.draw(st.sampled_from(ids)) if ids else None

    def _pick_running(self, data: st.DataObject, me: str | None = None) -> int:
        """A running job as connection `me` sees it; often one whose row is locked elsewhere, where
        writes must skip it or answer busy."""
        view = self.jobs if me is None else self._view(me)
        running = sorted(i for i, j in view.items() if j.state == "running")
        contested = sorted(set(running) & self._locked_by_others(me))
        if contested and data.draw(st.booleans()):
            return data.draw(st.sampled_from(contested))
        return data.draw(st.sampled_from(running))

    def _writer(self, data: st.DataObject, job: ModelJob, holder_share: int = 4) -> tuple[str, int]:
        """Who writes: mostly the holder, sometimes a stale token or another worker."""
        who = data.draw(st.sampled_from(["holder"] * holder_share + ["stale_token", "other_worker"]))
        owner = job.owner or job.last_owner or WORKERS[0]
        if who == "stale_token":
            return owner, job.token - data.draw(st.integers(1, 2))
        if who == "other_worker":
            return data.draw(st.sampled_from([w for w in WORKERS if w != owner])), job.token
        return owner, job.token

    def _waits_on_lock(self, what: str, coro: Coroutine[Any, Any, Any]) -> None:
        """A statement that must wait for a row lock held elsewhere: lock_timeout ends the wait,
        and the statement's changes roll back with it."""
        event(f"{what}: waits for a row lock")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            self.run(coro)

    # -- producers and operators ------------------------------------------------------------

    @initialize(
        data=st.data(),
        batches=st.lists(BATCHES, min_size=2, max_size=4),
        claimer=st.sampled_from([None, *WORKERS]),
        lease=st.sampled_from([3.0, 30.0]),
        dead=st.booleans(),
        offerer=st.sampled_from([None, *WORKERS]),
    )
    def seed(
        self,
        data: st.DataObject,
        batches: list[tuple[int, int, float | None, str | None, int, str]],
        claimer: str | None,
        lease: float,
        dead: bool,
        offerer: str | None,
    ) -> None:
        """Every run starts with some jobs, maybe some already claimed, so that its steps go to the
        lease rather than to waiting for one; maybe one already dead, since the operator's
        commands on dead jobs otherwise rarely find one; and maybe a worker's standing offer, which
        lone jobs take once nothing waits before them."""
        if offerer is not None:
            self.offer(offerer, TASKS, lease, 30.0)
        for batch in batches:
            self.enqueue(*batch)
        if claimer is not None:
            self.claim(claimer, limit=3, lease=lease, oldest=0, tasks=None)
            running = sorted(i for i, j in self.jobs.items() if j.state == "running")
            if dead and running:
                job = self.jobs[running[0]]
                assert job.owner is not None
                self._fail(
                    data, running[0], None, "PERMANENT", at_deadline=False, writer=(job.owner, job.token)
                )

    @rule(batch=BATCHES)
    def enqueue_batch(self, batch: tuple[int, int, float | None, str | None, int, str]) -> None:
        self.enqueue(*batch)

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

    @precondition(lambda self: bool(self.jobs))
    @rule(
        data=st.data(),
        action=st.sampled_from(["retry", "dead_reprocess", "cancel", "requeue", "ordering_skip"]),
    )
    def operator(self, data: st.DataObject, action: str) -> None:
        """An operator's command, through the statement the product runs for it: Client.retry
        (`tenure retry`, the dashboard's retry), the dead-job workflow (`tenure dead reprocess`,
        the dead-jobs page), Client.cancel (`tenure cancel`, the dashboard's cancel, revoke and
        requeue) and the ordering skip. One rule for all, so that they do not crowd out the
        workers' steps."""
        self._operate(data, action, None)

    @precondition(lambda self: any(j.state == "dead" for j in self.jobs.values()))
    @rule(data=st.data(), action=st.sampled_from(["retry", "dead_reprocess", "cancel", "ordering_skip"]))
    def operator_on_dead(self, data: st.DataObject, action: str) -> None:
        """The commands that take dead jobs, mostly on a dead job: few runs have one when the
        operator's turn comes, and three statements take a dead job somewhere else."""
        self._operate(data, action, {"dead"})

    def _operate(self, data: st.DataObject, action: str, likely: set[str] | None) -> None:
        if action == "retry":
            self._retry(data, likely or {"dead", "cancelled"})
        elif action == "dead_reprocess":
            self._dead_reprocess(data)
        elif action == "requeue":
            self._cancel(data, {"running"}, requeue=True)
        elif action == "cancel":
            # Half the time a running job, to be revoked: its holder's later writes are the point.
            waiting = data.draw(st.sampled_from([{"running"}, {"scheduled", "pending", "dead"}]))
            self._cancel(data, likely or waiting, requeue=False)
        else:
            self._ordering_skip(data)

    def _pick_ids(self, data: st.DataObject, likely: set[str]) -> list[int]:
        """One job, mostly in a `likely` state, and now and then a second: a command on several
        jobs is all or nothing."""
        first = self._pick(data, likely if data.draw(st.booleans()) else None)
        first = first if first is not None else self._pick(data)
        assert first is not None
        ids = {first}
        if data.draw(st.integers(0, 3)) == 0:
            second = self._pick(data)
            assert second is not None
            ids.add(second)
        return sorted(ids)

    def _log_statement(self, expected: list[Event]) -> None:
        """The events one statement logged for several rows, in its own order: the model's must be
        the same set; the log's order is then the model's."""
        logged = self.run(self._event_rows())[len(self.events) :]
        assert sorted(logged) == sorted(expected), (logged, expected)
        for entry in logged:
            self._log(self.events, entry)

    def _retry(self, data: st.DataObject, likely: set[str]) -> None:
        """Scheduled or pending jobs run now; dead or cancelled ones come back pending with a fresh
        budget, keeping their token. A running or succeeded job refuses the whole command."""
        ids = self._pick_ids(data, likely)
        budget = data.draw(st.integers(1, 3))
        call = self.control.retry_many(
            self.conn, ids, attempts=budget, actor="model", reason="retry", now=self.now
        )
        # Every job named is locked, and with a keyed one coming back, its key's waiting and
        # running jobs too: a claim of one of them not yet committed must commit first.
        keys = {self.jobs[i].key for i in ids if self.jobs[i].state in ("dead", "cancelled")} - {None}
        kin = {
            i
            for i, j in self.jobs.items()
            if j.key in keys and j.state in ("scheduled", "pending", "running")
        }
        if (set(ids) | kin) & self._locked_by_others():
            self._waits_on_lock("retry", call)
            return
        rows = self.run(call)
        refused = [i for i in ids if self.jobs[i].state not in ("scheduled", "pending", "dead", "cancelled")]
        if refused:
            assert ([r.id for r in rows.refused], rows.moved) == (refused, []), (ids, rows)
            event("retry: refused")
            return
        assert ([r.id for r in rows.moved], rows.refused) == (ids, []), (ids, rows)
        expected: list[Event] = []
        for job_id in ids:
            job = self.jobs[job_id]
            back = job.state in ("dead", "cancelled")
            self.jobs[job_id] = replace(
                job,
                state="pending",
                max_attempts=job.attempts + budget if back else job.max_attempts,
                available_at=self.now,
                finished_at=None,
            )
            if back:
                self.reprocessed.add(job_id)
            name = "reprocess" if back else "retry_now"
            expected.append((job_id, name, job.state, "pending", job.token, "model", None))
            event(f"retry: {job.state}")
        self._log_statement(expected)

    def _dead_reprocess(self, data: st.DataObject) -> None:
        """Dead jobs, named or matched by a filter (the first `limit` by id), back to pending with
        a fresh budget, keeping their token; the others named are left as they are."""
        budget = data.draw(st.integers(1, 3))
        filters: dict[str, Any] = {}
        if data.draw(st.booleans()):
            ids: list[int] | None = self._pick_ids(data, {"dead"})
            limit = len(ids)
            matching = [i for i in ids if self.jobs[i].state == "dead"]
        else:
            ids = None
            codes = sorted({j.error_code for j in self.jobs.values() if j.state == "dead" and j.error_code})
            filters = {
                "task": data.draw(st.sampled_from([None, *TASKS])),
                "error_code": data.draw(st.sampled_from([None, "NO_SUCH_CODE", *codes])),
            }
            limit = data.draw(st.integers(1, 3))
            matching = sorted(
                i
                for i, j in self.jobs.items()
                if j.state == "dead"
                and filters["task"] in (None, j.task)
                and filters["error_code"] in (None, j.error_code)
            )
        chosen = matching[:limit]
        call = self.ops.dead_reprocess_many(
            self.conn,
            DeadFilter(queue=QUEUE, **filters),
            ids=ids,
            limit=limit,
            attempts=budget,
            actor="model",
            reason="reprocess",
            now=self.now,
        )
        # The matching rows are locked in id order, up to the limit; then job_retry_many moves
        # them, locking the waiting and running jobs of their keys first, as a retry does.
        keys = {self.jobs[i].key for i in chosen} - {None}
        kin = {
            i
            for i, j in self.jobs.items()
            if j.key in keys and j.state in ("scheduled", "pending", "running")
        }
        if (set(chosen) | kin) & self._locked_by_others():
            self._waits_on_lock("dead reprocess", call)
            return
        assert self.run(call) == chosen, (ids, filters, limit)
        event(f"dead reprocess: {len(chosen)} of {len(matching)}")
        for job_id in chosen:
            job = self.jobs[job_id]
            self.jobs[job_id] = replace(
                job,
                state="pending",
                max_attempts=job.attempts + budget,
                available_at=self.now,
                finished_at=None,
            )
            self.reprocessed.add(job_id)
        self._log_statement(
            [(i, "reprocess", "dead", "pending", self.jobs[i].token, "model", None) for i in chosen]
        )

    def _cancel(self, data: st.DataObject, likely: set[str], requeue: bool) -> None:
        """Scheduled, pending and dead jobs are cancelled; a running one is revoked: its lease ends
        here and its token moves on, so nothing its holder writes later lands. With `requeue`, a
        running job goes back to pending instead (the revoked attempt not counted). By ids (any
        job that cannot be cancelled refuses the whole command) or by a filter (more matches than
        the bound refuse it)."""
        running = requeue or data.draw(st.booleans())
        if data.draw(st.integers(0, 2)) == 0:
            where = CancelFilter(
                queue=QUEUE, task=data.draw(st.sampled_from([None, *TASKS])), running=running
            )
            given, max_jobs = None, data.draw(st.integers(1, 3))
        else:
            where, given, max_jobs = CancelFilter(), self._pick_ids(data, likely), None
        # The ids and the bound as Client.cancel computes them.
        ids, bound = check_cancel(given, where, requeue=requeue, max_jobs=max_jobs)
        if requeue:
            accept = {"running"}
        elif ids is not None:
            accept = {"scheduled", "pending", "running", "dead"}
        else:
            accept = {"scheduled", "pending"} | ({"running"} if running else set())
        if ids is not None:
            target = ids
        else:
            target = sorted(
                i for i, j in self.jobs.items() if j.state in accept and where.task in (None, j.task)
            )[: bound + 1]
        call = self.control.cancel_many(
            self.conn,
            ids,
            where,
            requeue=requeue,
            max_jobs=bound,
            actor="model",
            reason="cancel",
            now=self.now,
        )
        what = "requeue" if requeue else "cancel"
        if set(target) & self._locked_by_others():
            self._waits_on_lock(what, call)
            return
        rows = self.run(call)
        refused = [i for i in target if self.jobs[i].state not in accept]
        if refused:
            assert ([r.id for r in rows.refused], rows.moved) == (refused, []), (ids, rows)
            event(f"{what}: refused")
            return
        if len(target) > bound:
            assert rows.too_many and not rows.moved, (where, bound, rows)
            event(f"{what}: too many")
            return
        assert ([r.id for r in rows.moved], rows.too_many) == (target, False), (ids, where, rows)
        expected: list[Event] = []
        for job_id in target:
            job = self.jobs[job_id]
            if job.state != "running":
                self.jobs[job_id] = self._finished(job, "cancelled", error_code="CANCELLED")
                expected.append((job_id, "cancel", job.state, "cancelled", job.token, "model", None))
                event(f"cancel: {job.state}")
                continue
            assert job.owner is not None
            self.revoked[job_id] = (job.owner, job.token)
            token = job.token + 1
            if requeue:
                self.jobs[job_id] = _released(
                    job,
                    state="pending",
                    token=token,
                    attempts=job.attempts - 1,
                    available_at=self.now,
                    releases=job.releases + 1,
                    error_code="REQUEUED",
                )
            else:
                self.jobs[job_id] = self._finished(job, "cancelled", token=token, error_code="REVOKED")
            to = self.jobs[job_id].state
            expected.append((job_id, "revoke", "running", to, token, "model", f"HELD_BY {job.owner}"))
            event(f"{what}: revoked")
        self._log_statement(expected)
        # Often the holder is writing at that very moment.
        revoked = [i for i in target if i in self.revoked and self.revoked[i][1] < self.jobs[i].token]
        if revoked and data.draw(st.booleans()):
            self._revoked_write(
                data, data.draw(st.sampled_from(revoked)), data.draw(st.sampled_from(REVOKED_WRITES))
            )

    def _ordering_skip(self, data: st.DataObject) -> None:
        """The operator lists the keys a dead job blocks, then skips a job (mostly a dead head):
        any keyed job that is dead or waiting becomes cancelled, and the next of its key may run."""
        dead_keyed = sorted(i for i, j in self.jobs.items() if j.state == "dead" and j.key is not None)
        blocked = self.run(self.ordering.blocked(self.conn, limit=100))
        expected_blocked = [
            (
                i,
                self.jobs[i].key,
                sum(
                    1
                    for w, j in self.jobs.items()
                    if j.key == self.jobs[i].key and j.state in ("scheduled", "pending") and w > i
                ),
            )
            for i in sorted(dead_keyed, key=lambda i: (self.jobs[i].finished_at, i))
        ]
        assert [(r.id, r.ordering_key, r.waiting) for r in blocked] == expected_blocked
        event(f"ordering blocked: {len(blocked)} dead heads")
        pick = dead_keyed if dead_keyed and data.draw(st.booleans()) else sorted(self.jobs)
        job_id = data.draw(st.sampled_from(pick))
        job = self.jobs[job_id]
        eligible = job.key is not None and job.state in ("scheduled", "pending", "dead")
        call = self.ordering.skip(self.conn, job_id, actor="operator", reason="skip", now=self.now)
        # job_cancel_many locks every keyed job it is named, then refuses the ineligible ones.
        if job.key is not None and job_id in self._locked_by_others():
            self._waits_on_lock("ordering skip", call)
            return
        skipped = self.run(call)
        if not eligible:
            assert skipped is None, (job_id, job, skipped)
            return
        assert skipped == SkippedJob(job_id, job.key)
        event(f"ordering skip: {job.state} job")
        self.jobs[job_id] = self._finished(job, "cancelled", error_code="CANCELLED")
        self._log(
            self.events,
            (job_id, "cancel", job.state, "cancelled", job.token, "operator", "ORDERING_SKIP"),
        )

    @precondition(lambda self: bool(self.jobs))
    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 3.5, 8.0, 25.0]))
    def advance_time(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @precondition(lambda self: any(j.state == "scheduled" for j in self.jobs.values()))
    @rule()
    def promote(self) -> None:
        """Every scheduled job due by now and not locked elsewhere becomes pending, keeping its run
        time."""
        locked = self._locked_by_others()
        result = self.run(self.q.job_promote_due(self.conn, limit=100, now=self.now))
        due = [
            i
            for i, j in self.jobs.items()
            if j.state == "scheduled" and j.available_at <= self.now and i not in locked
        ]
        assert result.promoted == len(due)
        for i in due:
            self.jobs[i] = replace(self.jobs[i], state="pending")
        later = [
            j.available_at for j in self.jobs.values() if j.state == "scheduled" and j.available_at > self.now
        ]
        assert result.next_due == (min(later) if later else None)

    # -- workers ------------------------------------------------------------------------------

    def _claim(
        self,
        conn: psycopg.AsyncConnection[Any],
        view: dict[int, ModelJob],
        locked: set[int],
        worker: str,
        limit: int,
        lease: float,
        oldest: int,
        tasks: tuple[str, ...] | None,
    ) -> dict[int, ModelJob]:
        """One claim on `conn`, which sees `view`; returns the claimed jobs' new versions."""
        claimable = [
            i
            for i, j in view.items()
            if j.state == "pending"
            and j.available_at <= self.now
            and i not in locked
            and self._is_head(view, i)
            and (tasks is None or j.task in tasks)
        ]
        # The oldest-first share, then the best by priority among the rest.
        by_age = sorted(claimable, key=lambda i: (view[i].available_at, i))[: min(oldest, limit)]
        rest = [i for i in claimable if i not in by_age]
        by_priority = sorted(rest, key=lambda i: (-view[i].priority, view[i].available_at, i))
        expected = sorted(by_age + by_priority[: limit - len(by_age)])
        if any(i in locked for i, j in view.items() if j.state == "pending" and j.available_at <= self.now):
            event("claim: a due row is locked elsewhere")
        claimed = self.run(
            self.q.job_claim(
                conn,
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
        got = [c.id for c in claimed]
        assert not set(got) & locked, f"claimed rows locked by another transaction: {set(got) & locked}"
        assert got == expected, f"claim by {worker} at {self.now} took {got}, the model {expected}"
        new: dict[int, ModelJob] = {}
        for c in claimed:
            job = view[c.id]
            assert job.state == "pending" and c.available_at <= self.now, "claimed before it was due"
            new[c.id] = replace(
                job,
                state="running",
                attempts=job.attempts + 1,
                token=job.token + 1,
                owner=worker,
                last_owner=worker,
                expires_at=self.now + timedelta(seconds=min(lease, RUNTIME)),
                deadline=self.now + timedelta(seconds=RUNTIME),
                claims=job.claims + 1,
            )
            assert c.lease.token == job.token + 1 and c.attempt == job.attempts + 1
        return new

    @precondition(lambda self: any(j.state == "pending" for j in self.jobs.values()))
    @rule(
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 3),
        lease=st.sampled_from([1.0, 3.0, 10.0, 30.0]),
        oldest=st.integers(0, 3),
        tasks=st.sampled_from([None, TASKS[:1], TASKS]),
    )
    def claim(
        self, worker: str, limit: int, lease: float, oldest: int, tasks: tuple[str, ...] | None
    ) -> None:
        self.jobs.update(
            self._claim(self.conn, self.jobs, self._locked_by_others(), worker, limit, lease, oldest, tasks)
        )

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), moved=st.booleans(), lease=st.sampled_from([1.0, 5.0, 30.0]))
    def heartbeat(self, data: st.DataObject, moved: bool, lease: float) -> None:
        job_id = self._pick_running(data)
        owner, token = self._writer(data, self.jobs[job_id])
        self._heartbeat(job_id, owner, token, moved, lease)

    def _heartbeat(self, job_id: int, owner: str, token: int, moved: bool, lease: float) -> None:
        job = self.jobs[job_id]
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
            and job_id not in self._locked_by_others()
        )
        assert bool(renewed) == expected, (
            f"heartbeat of job {job_id} by ({owner}, {token}) at {self.now} "
            f"{'renewed' if renewed else 'was refused'}, the model says it must "
            f"{'renew' if expected else 'be refused'}: {job}, locked elsewhere {self._locked_by_others()}"
        )
        event(f"heartbeat: {'renewed' if expected else 'refused'}")
        if expected:
            assert job.deadline is not None
            expires = min(self.now + timedelta(seconds=lease), job.deadline)
            assert renewed[0].expires_at == expires
            self.jobs[job_id] = replace(job, expires_at=expires, progress=marker)

    def _complete(
        self,
        conn: psycopg.AsyncConnection[Any],
        view: dict[int, ModelJob],
        locked: set[int],
        job_id: int,
        owner: str,
        token: int,
        sink: list[tuple[int, Event]],
    ) -> ModelJob | None:
        """One fenced completion on `conn`, which sees `view`; the job's new version if it landed."""
        job = view[job_id]
        new = None
        if job.holds(owner, token, self.now) and job_id not in locked:
            # A succeeded job shows no error: the earlier attempts' are in its history.
            expected, new = "done", self._finished(job, "succeeded", error_code=None)
        elif job.state == "succeeded" and job.token == token:
            # A repeat of the completion that landed (its reply lost): answered, applied once.
            # The row keeps no owner after success, so the token alone decides.
            expected = "done"
        elif job.holds(owner, token, self.now):
            expected = "busy"
        else:
            expected = "lost"
            self._log(sink, (job_id, "fencing_lost", "running", None, token, owner, "FENCED_COMPLETE"))
        result = self.run(self.q.job_complete_many(conn, owner=owner, leases=[(job_id, token)], now=self.now))
        assert result == {(job_id, token): expected}, (
            f"completion of job {job_id} by ({owner}, {token}) at {self.now} answered {result}, "
            f"the model {expected!r}: {job}, locked elsewhere {sorted(locked)}"
        )
        event(f"complete{' again' if job.state == 'succeeded' else ''}: {expected}")
        return new

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        job_id = self._pick_running(data)
        owner, token = self._writer(data, self.jobs[job_id])
        new = self._complete(
            self.conn, self.jobs, self._locked_by_others(), job_id, owner, token, self.events
        )
        if new is not None:
            self.jobs[job_id] = new

    @precondition(lambda self: any(j.state == "succeeded" for j in self.jobs.values()))
    @rule(data=st.data())
    def complete_again(self, data: st.DataObject) -> None:
        """A completion of a job that already succeeded: the same (owner, token) again, or a stale
        token, or another worker; nothing changes."""
        job_id = self._pick(data, {"succeeded"})
        assert job_id is not None
        owner, token = self._writer(data, self.jobs[job_id])
        assert (
            self._complete(self.conn, self.jobs, self._locked_by_others(), job_id, owner, token, self.events)
            is None
        )

    def _fail(
        self,
        data: st.DataObject,
        job_id: int,
        retry_delay: float | None,
        code: str,
        at_deadline: bool,
        writer: tuple[str, int] | None = None,
    ) -> None:
        job = self.jobs[job_id]
        owner, token = writer or self._writer(data, job)
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
                at_deadline=at_deadline,
                now=self.now,
            )
        )
        seen = (outcome.outcome, outcome.state, outcome.available_at)
        lapsed = job.expires_at is not None and job.expires_at <= self.now
        kind = ("fail at deadline" if at_deadline else "fail") + (" past its lease" if lapsed else "")
        event(f"{kind}: {outcome.outcome}")
        why = f"{kind} of job {job_id} by ({owner}, {token}) at {self.now} answered {seen}: {job}"
        if not job.holds(owner, token, self.now, at_deadline=at_deadline):
            assert seen == ("lost", None, None), f"{why}; the fence does not hold, so it must be lost"
            self._log(self.events, (job_id, "fencing_lost", "running", None, token, owner, "FENCED_FAIL"))
            return
        if job_id in self._locked_by_others():
            assert seen == ("busy", None, None), f"{why}; the row is locked elsewhere, so it must be busy"
            return
        assert outcome.outcome == "failed" and outcome.state is not None, f"{why}; it must land"
        if delay is not None and job.attempts < job.max_attempts:
            available = self.now + timedelta(seconds=delay)
            waiting = self._waiting(available)
            assert (outcome.state.value, outcome.available_at) == (waiting, available)
            self.jobs[job_id] = _released(job, state=waiting, available_at=available, error_code=code)
            self._log(self.events, (job_id, "retry", "running", waiting, token, owner, code))
        else:
            assert outcome.state.value == "dead"
            self.jobs[job_id] = self._finished(job, "dead", error_code=code)
            self._log(self.events, (job_id, "dead", "running", "dead", token, owner, code))

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(
        data=st.data(),
        retry_delay=st.sampled_from([None, 0.0, 2.0]),
        code=st.sampled_from(["TRANSIENT", "PERMANENT", "UNKNOWN"]),
    )
    def fail(self, data: st.DataObject, retry_delay: float | None, code: str) -> None:
        """Each error class reaches SQL as a retry delay (transient, unknown within budget) or None."""
        job_id = self._pick_running(data)
        self._fail(data, job_id, retry_delay, code, at_deadline=False)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), retry_delay=st.sampled_from([None, 0.0, 2.0]), wait_out=st.booleans())
    def fail_at_deadline(self, data: st.DataObject, retry_delay: float | None, wait_out: bool) -> None:
        """The failure written when the max runtime ended the attempt: it lands while the lease is
        live, or once the deadline itself has passed (the lease, capped there, is gone too), but not
        in between, and never after recovery or another claim took the job. With `wait_out` the
        clock first moves to the job's deadline, as the runtime's watchdog fires there."""
        past = sorted(
            i
            for i, j in self.jobs.items()
            if j.state == "running" and j.deadline is not None and j.deadline <= self.now
        )
        job_id = data.draw(st.sampled_from(past)) if past and data.draw(st.booleans()) else None
        job_id = job_id if job_id is not None else self._pick_running(data)
        deadline = self.jobs[job_id].deadline
        if wait_out and deadline is not None and deadline > self.now:
            self.now = deadline
        self._fail(data, job_id, retry_delay, "MAX_RUNTIME", at_deadline=True)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """The holder gives the job back (graceful shutdown): pending at once, the attempt not
        counted, the token kept; a stale, foreign, expired or blocked release changes nothing."""
        job_id = self._pick_running(data)
        owner, token = self._writer(data, self.jobs[job_id])
        self._release(job_id, owner, token)

    def _release(self, job_id: int, owner: str, token: int) -> None:
        job = self.jobs[job_id]
        released = self.run(
            self.q.lease_release_many(self.conn, owner=owner, leases=[(job_id, token)], now=self.now)
        )
        expected = job.holds(owner, token, self.now) and job_id not in self._locked_by_others()
        assert released == ([job_id] if expected else []), (
            f"release of job {job_id} by ({owner}, {token}) at {self.now} released {released}, the model "
            f"says it must {'land' if expected else 'change nothing'}: {job}, "
            f"locked elsewhere {self._locked_by_others()}"
        )
        event(f"release: {'released' if expected else 'refused'}")
        if expected:
            self.jobs[job_id] = _released(
                job,
                state="pending",
                attempts=job.attempts - 1,
                available_at=self.now,
                releases=job.releases + 1,
            )
            self._log(self.events, (job_id, "released", "running", "pending", token, owner, "SHUTDOWN"))

    @precondition(lambda self: bool(self.revoked))
    @rule(data=st.data(), write=st.sampled_from(REVOKED_WRITES))
    def revoked_holder_writes(self, data: st.DataObject, write: str) -> None:
        self._revoked_write(data, data.draw(st.sampled_from(sorted(self.revoked))), write)

    def _revoked_write(self, data: st.DataObject, job_id: int, write: str) -> None:
        """The holder of a revoked lease has not heard yet and goes on writing; nothing it writes
        lands, whatever the job has become since: cancelled, pending again, or running again under
        a new lease (maybe its own)."""
        owner, token = self.revoked[job_id]
        assert not self.jobs[job_id].holds(owner, token, self.now, at_deadline=True)
        event(f"revoked holder: {write} while {self.jobs[job_id].state}")
        if write == "complete":
            locked = self._locked_by_others()
            assert self._complete(self.conn, self.jobs, locked, job_id, owner, token, self.events) is None
        elif write == "fail":
            self._fail(data, job_id, 0.0, "TRANSIENT", at_deadline=False, writer=(owner, token))
        elif write == "heartbeat":
            self._heartbeat(job_id, owner, token, moved=True, lease=30.0)
        elif write == "release":
            self._release(job_id, owner, token)
        else:
            self._begin_effect(job_id, owner, token, finish=True, hook=None)

    # -- the effect ledger --------------------------------------------------------------------

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(
        data=st.data(),
        finish=st.sampled_from([True, False, False]),
        hook=st.sampled_from([None, None, "done", "intent"]),
    )
    def effect(self, data: st.DataObject, finish: bool, hook: str | None) -> None:
        """An attempt records an effect's intent (fenced) and maybe its outcome; an intent that an
        earlier attempt left behind becomes uncertain and is never performed again by itself: the
        application's reconciliation hook may settle it at once (`hook`), or leave it."""
        again = sorted(i for i in self.effects if self.jobs[i].state == "running")
        job_id = data.draw(st.sampled_from(again)) if again and data.draw(st.booleans()) else None
        job_id = job_id if job_id is not None else self._pick_running(data)
        owner, token = self._writer(data, self.jobs[job_id], holder_share=6)
        self._begin_effect(job_id, owner, token, finish, hook)

    @precondition(lambda self: any(j.state == "pending" for j in self.jobs.values()))
    @rule(
        worker=st.sampled_from(WORKERS), finish=st.booleans(), hook=st.sampled_from([None, "done", "intent"])
    )
    def claim_and_begin_effect(self, worker: str, finish: bool, hook: str | None) -> None:
        """A worker claims one job and its handler goes straight to the external call, the common
        shape of a job with an effect."""
        claimed = self._claim(self.conn, self.jobs, self._locked_by_others(), worker, 1, 10.0, 0, None)
        self.jobs.update(claimed)
        for job_id, job in claimed.items():
            self._begin_effect(job_id, worker, job.token, finish, hook)

    def _begin_effect(self, job_id: int, owner: str, token: int, finish: bool, hook: str | None) -> None:
        job = self.jobs[job_id]
        prior = self.effects.get(job_id)
        call = self.ledger.begin(
            self.conn, job_id=job_id, name=EFFECT, owner=owner, token=token, now=self.now
        )
        if job.holds(owner, token, self.now) and prior is None and job_id in self._locked_by_others():
            # A fresh ledger row checks its foreign key with FOR KEY SHARE on the job row, which
            # waits for a FOR UPDATE lock held elsewhere.
            self._waits_on_lock("effect begin", call)
            return
        step = self.run(call)
        if not job.holds(owner, token, self.now):
            assert step is None
            return
        assert step is not None
        action = {
            None: "perform",
            "not_happened": "perform",
            "intent": "uncertain",
            "uncertain": "uncertain",
            "done": "done",
        }[prior[0] if prior else None]
        assert step.action == action, (job_id, prior, step)
        event(f"effect begin: {action}")
        assert self.effect_ids.setdefault(job_id, step.effect_id) == step.effect_id
        if action == "perform":
            self.effects[job_id] = ("intent", token)
            self.performed[job_id] = self.performed.get(job_id, 0) + 1
            if finish:
                assert self.run(
                    self.ledger.done(self.conn, job_id=job_id, name=EFFECT, token=token, outcome={"t": token})
                )
                self.effects[job_id] = ("done", token)
        elif action == "uncertain":
            assert prior is not None
            self.effects[job_id] = ("uncertain", prior[1])
            if hook is not None:
                self._reconcile(job_id, owner, token, hook, finish)

    @precondition(lambda self: bool(self.effects))
    @rule(data=st.data(), same_token=st.booleans())
    def effect_finish(self, data: st.DataObject, same_token: bool) -> None:
        """A performed call's outcome, reported late: guarded by the ledger row (still the intent of
        that token), not by the lease, so it lands even after the lease is gone."""
        # Any ledger row, not mostly intents: a late outcome is rare, and an intent left open is what
        # the operator's verdicts are about.
        job_id = data.draw(st.sampled_from(sorted(self.effects)))
        state, token = self.effects[job_id]
        written = token if same_token else token + 1
        landed = self.run(
            self.ledger.done(self.conn, job_id=job_id, name=EFFECT, token=written, outcome={"late": written})
        )
        assert landed == (state == "intent" and written == token), (
            f"late outcome for job {job_id} with token {written} landed={landed}; ledger {state} of {token}"
        )
        if landed:
            self.effects[job_id] = ("done", token)

    @precondition(lambda self: any(s in ("uncertain", "intent") for s, _ in self.effects.values()))
    @rule(data=st.data(), verdict=st.sampled_from(["done", "not_happened"]))
    def effect_resolve(self, data: st.DataObject, verdict: str) -> None:
        """An operator's verdict on an uncertain effect, or on an intent whose job is not running:
        'done' (it happened), or 'not_happened' (the next attempt performs it). Never on an attempt
        in flight, never on a settled effect."""
        # Mostly the open ones: an intent of an attempt in flight is where the guard says no.
        job_id = self._pick_effect(data, lambda s, job: s in ("uncertain", "intent"))
        state, token = self.effects[job_id]
        job = self.jobs[job_id]
        resolved = self.run(
            self.ledger.resolve(
                self.conn,
                effect_id=self.effect_ids[job_id],
                state=verdict,
                actor="operator",
                reason="checked the remote side",
                outcome={"by": "operator"} if verdict == "done" else None,
                now=self.now,
            )
        )
        allowed = state == "uncertain" or (state == "intent" and job.state != "running")
        why = f"resolving job {job_id}'s {state} effect (job {job.state}) as {verdict} gave {resolved}"
        if not allowed:
            assert resolved is None, (
                f"{why}; only an uncertain effect or an idle job's intent may be resolved"
            )
            event(f"effect resolve: refused on {state}")
            return
        assert resolved is not None, f"{why}; it must be resolved"
        assert (resolved.job_id, resolved.job_state) == (job_id, job.state)
        self.effects[job_id] = (verdict, token)
        event(f"effect resolve: {state} -> {verdict}")
        if verdict == "not_happened":
            self.performed[job_id] = 0

    @precondition(lambda self: any(s == "uncertain" for s, _ in self.effects.values()))
    @rule(data=st.data(), verdict=st.sampled_from(["done", "intent"]), finish=st.booleans())
    def effect_reconcile(self, data: st.DataObject, verdict: str, finish: bool) -> None:
        """The application's reconciliation hook settles an uncertain effect, fenced by the lease:
        'done', or 'intent' under this token when the call never happened (it is performed now)."""
        job_id = self._pick_effect(data, lambda s, job: s == "uncertain")
        owner, token = self._writer(data, self.jobs[job_id])
        self._reconcile(job_id, owner, token, verdict, finish)

    def _pick_effect(self, data: st.DataObject, eligible: Callable[[str, ModelJob], bool]) -> int:
        """A job with a ledger row, mostly one where the write under test may land."""
        ids = sorted(self.effects)
        likely = [i for i in ids if eligible(self.effects[i][0], self.jobs[i])]
        return data.draw(st.sampled_from(likely if likely and data.draw(st.booleans()) else ids))

    def _reconcile(self, job_id: int, owner: str, token: int, verdict: str, finish: bool) -> None:
        state, _ = self.effects[job_id]
        job = self.jobs[job_id]
        landed = self.run(
            self.ledger.reconciled(
                self.conn,
                job_id=job_id,
                name=EFFECT,
                owner=owner,
                token=token,
                state=verdict,
                outcome={"hook": token} if verdict == "done" else None,
                now=self.now,
            )
        )
        assert landed == (state == "uncertain" and job.holds(owner, token, self.now)), (
            f"reconciliation of job {job_id}'s {state} effect by ({owner}, {token}) at {self.now} "
            f"landed={landed}: {job}"
        )
        if not landed:
            return
        self.effects[job_id] = (verdict, token)
        event(f"effect reconcile: {verdict}")
        if verdict == "intent":
            self.performed[job_id] = 1
            if finish:
                assert self.run(
                    self.ledger.done(self.conn, job_id=job_id, name=EFFECT, token=token, outcome={"t": token})
                )
                self.effects[job_id] = ("done", token)

    # -- recovery -------------------------------------------------------------------------------

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule()
    def recover(self) -> None:
        locked = self._locked_by_others()
        recovered = self.run(
            self.q.lease_recover_expired(
                self.conn, limit=100, backoff_base=BACKOFF, backoff_cap=BACKOFF, jitter=0.0, now=self.now
            )
        )
        due = {
            i
            for i, j in self.jobs.items()
            if j.state == "running"
            and j.expires_at is not None
            and j.expires_at <= self.now
            and i not in locked
        }
        assert {r.job_id for r in recovered} == due
        for r in sorted(recovered, key=lambda r: r.job_id):
            job = self.jobs[r.job_id]
            assert (r.previous_owner, r.token) == (job.owner, job.token)
            if job.attempts >= job.max_attempts:
                self.jobs[r.job_id] = self._finished(job, "dead", error_code="LEASE_EXPIRED")
            else:
                later = self.now + timedelta(seconds=BACKOFF)
                self.jobs[r.job_id] = _released(
                    job, state=self._waiting(later), available_at=later, error_code="LEASE_EXPIRED"
                )
            assert r.state.value == self.jobs[r.job_id].state
        # One statement logs its rows in its own order: match the model's to the log's.
        logged = self.run(self._event_rows())[len(self.events) :]
        assert sorted(logged) == sorted(
            (r.job_id, "lease_expired", "running", r.state.value, r.token, r.previous_owner, "LEASE_EXPIRED")
            for r in recovered
        )
        for entry in logged:
            self._log(self.events, entry)

    # -- an operator's row lock ---------------------------------------------------------------

    @precondition(lambda self: self.locked_row is None and bool(self.jobs))
    @rule(data=st.data())
    def lock_row(self, data: st.DataObject) -> None:
        """An operator's open transaction holds SELECT ... FOR UPDATE on one job row."""
        free = sorted(set(self.jobs) - self._locked_by_others())
        if not free:
            return
        running = [i for i in free if self.jobs[i].state == "running"]
        job_id = data.draw(st.sampled_from(running if running and data.draw(st.booleans()) else free))
        query = f"SELECT id FROM {SCHEMA}.jobs WHERE id = %s FOR UPDATE"
        assert self.run(self._fetch_one(self.locker, query, job_id)) == job_id
        self.locked_row = job_id

    async def _fetch_one(self, conn: psycopg.AsyncConnection[Any], query: str, arg: Any) -> Any:
        row = await (await conn.execute(query, [arg])).fetchone()
        return row[0] if row else None

    @precondition(lambda self: self.locked_row is not None)
    @rule(commit=st.booleans())
    def unlock_row(self, commit: bool) -> None:
        self.run(self.locker.commit() if commit else self.locker.rollback())
        self.locked_row = None

    # -- two workers in explicit transactions ---------------------------------------------------

    def _view(self, name: str) -> dict[int, ModelJob]:
        """What a statement of transaction `name` sees: the committed rows and its own writes."""
        return {**self.jobs, **self.txns[name].rows}

    @precondition(lambda self: any(j.state == "pending" for j in self.jobs.values()))
    @rule(
        name=st.sampled_from(TRANSACTIONS),
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 3),
        lease=st.sampled_from([3.0, 10.0]),
        oldest=st.integers(0, 3),
    )
    def txn_claim(self, name: str, worker: str, limit: int, lease: float, oldest: int) -> None:
        """A claim inside an open transaction: it skips rows the other transactions and the
        operator hold, and its own claims stay locked and invisible to others until it ends."""
        txn = self.txns[name]
        txn.open = True
        locked = self._locked_by_others(name)
        txn.rows.update(self._claim(txn.conn, self._view(name), locked, worker, limit, lease, oldest, None))

    @precondition(
        lambda self: (
            any(j.state == "running" for j in self.jobs.values())
            or any(j.state == "running" for t in self.txns.values() for j in t.rows.values())
        )
    )
    @rule(name=st.sampled_from(TRANSACTIONS), data=st.data())
    def txn_complete(self, name: str, data: st.DataObject) -> None:
        """A fenced completion inside an open transaction, of a job running as it sees it."""
        txn = self.txns[name]
        view = self._view(name)
        if not any(j.state == "running" for j in view.values()):
            return
        job_id = self._pick_running(data, name)
        txn.open = True
        owner, token = self._writer(data, view[job_id])
        new = self._complete(txn.conn, view, self._locked_by_others(name), job_id, owner, token, txn.events)
        if new is not None:
            txn.rows[job_id] = new

    @precondition(lambda self: any(t.open for t in self.txns.values()))
    @rule(data=st.data(), commit=st.booleans())
    def txn_end(self, data: st.DataObject, commit: bool) -> None:
        """An open transaction commits (its writes and events become everyone's) or rolls back
        (as if it never ran)."""
        name = data.draw(st.sampled_from([n for n, t in self.txns.items() if t.open]))
        txn = self.txns[name]
        self.run(txn.conn.commit() if commit else txn.conn.rollback())
        event(f"transaction {'commit' if commit else 'rollback'}{' of writes' if txn.rows else ''}")
        if commit:
            self.jobs.update(txn.rows)
            self.events = sorted(self.events + txn.events)
        self.txns[name] = Transaction(txn.conn)

    # -- hand-off -------------------------------------------------------------------------------

    @rule(
        worker=st.sampled_from(WORKERS),
        tasks=st.sampled_from([TASKS[:1], TASKS]),
        lease=st.sampled_from([3.0, 30.0]),
        stands_for=st.sampled_from([1.0, 30.0]),
    )
    def offer(self, worker: str, tasks: tuple[str, ...], lease: float, stands_for: float) -> None:
        """A worker offers a slot to the next lone job, or offers it again (one slot, whatever
        it had)."""
        self.run(
            self.offer_q.make(
                self.conn,
                worker=worker,
                channel=f"model.{worker}",
                queues=[QUEUE],
                tasks=list(tasks),
                lease_seconds=lease,
                runtime_seconds=RUNTIME,
                stands_for=stands_for,
                now=self.now,
            )
        )
        self.offers[worker] = ModelOffer(tasks, lease, self.now + timedelta(seconds=stands_for))

    @precondition(lambda self: bool(self.offers))
    @rule(data=st.data())
    def withdraw_offer(self, data: st.DataObject) -> None:
        """A worker takes its offer back, and learns whether a job took it."""
        worker = data.draw(st.sampled_from(sorted(self.offers)))
        slots = self.run(self.offer_q.withdraw(self.conn, worker=worker))
        assert slots == self.offers.pop(worker).slots

    @rule(max_attempts=st.integers(1, 4), priority=st.sampled_from([0, 5]), task=st.sampled_from(TASKS))
    def enqueue_lone(self, max_attempts: int, priority: int, task: str) -> None:
        """A lone job due now, committed on its own, whose queue was at rest: it takes a standing
        offer of its task when no due job of the queue is pending, and goes in running under
        that worker's lease (attempt 1, token 1); else it goes in pending."""
        spec = JobSpec(task=task, queue=QUEUE, max_attempts=max_attempts, priority=priority)
        [job] = self.run(self.q.job_insert_many(self.conn, [spec], now=self.now, hand_off=True))
        takers = [w for w, o in self.offers.items() if o.slots > 0 and o.until > self.now and task in o.tasks]
        waits = any(j.state == "pending" and j.available_at <= self.now for j in self.jobs.values())
        cur = self.run(self.conn.execute(f"SELECT lease_owner FROM {SCHEMA}.jobs WHERE id = %s", [job.id]))
        (owner,) = self.run(cur.fetchone())
        if not takers or waits:
            event("lone enqueue: " + ("a job waits" if takers else "no offer to take"))
            assert owner is None, f"job {job.id} was handed to {owner} past the rules"
            self.jobs[job.id] = ModelJob(
                max_attempts=max_attempts, available_at=self.now, priority=priority, task=task
            )
            return
        event("lone enqueue: handed")
        assert owner in takers, f"job {job.id} went to {owner}, not one of {takers}"
        offer = self.offers[owner]
        offer.slots -= 1
        self.jobs[job.id] = ModelJob(
            state="running",
            attempts=1,
            max_attempts=max_attempts,
            token=1,
            owner=owner,
            last_owner=owner,
            available_at=self.now,
            expires_at=self.now + timedelta(seconds=min(offer.lease, RUNTIME)),
            deadline=self.now + timedelta(seconds=RUNTIME),
            priority=priority,
            task=task,
            claims=1,
        )

    # -- after every step ----------------------------------------------------------------------

    @invariant()
    def offers_match_the_model(self) -> None:
        """The standing offers and their slots are the model's: a job took one exactly when the
        model says it did."""
        cur = self.run(self.conn.execute(f"SELECT worker, slots, until FROM {SCHEMA}.worker_offers"))
        offers = {w: (slots, until) for w, slots, until in self.run(cur.fetchall())}
        assert offers == {w: (o.slots, o.until) for w, o in self.offers.items()}

    @invariant()
    def database_matches_the_model(self) -> None:
        rows = self.run(self._rows(self.conn))
        assert set(rows) == set(self.jobs), "a job appeared or disappeared"
        for job_id, job in self.jobs.items():
            row = rows[job_id]
            seen = (
                row["state"],
                row["attempt_count"],
                row["max_attempts"],
                row["lease_token"],
                row["lease_owner"],
                row["finished_at"],
                row["last_error_code"],
            )
            modelled = (
                job.state,
                job.attempts,
                job.max_attempts,
                job.token,
                job.owner,
                job.finished_at,
                job.error_code,
            )
            assert seen == modelled, f"job {job_id}: the database has {seen}, the model {modelled}"
            assert row["lease_expires_at"] == job.expires_at and row["lease_deadline"] == job.deadline
            assert (row["unset"], row["progress"]) == (
                (True, None) if job.progress is UNSET else (False, job.progress)
            ), (job_id, row, job)
            if job.state in ("scheduled", "pending"):
                assert row["available_at"] == job.available_at
            # Tokens only grow; attempts never exceed the budget; terminal rows carry finished_at.
            assert row["lease_token"] >= self.max_token_seen.get(job_id, 0)
            self.max_token_seen[job_id] = row["lease_token"]
            assert row["attempt_count"] <= row["max_attempts"]
            assert (row["finished_at"] is not None) == (job.state in TERMINAL)
            # A released attempt is not counted: attempts are claims less releases.
            assert row["attempt_count"] == job.claims - job.releases, (job_id, row, job)
            # At most one live lease: only a running job has an owner, and it has exactly one.
            assert (row["lease_owner"] is not None) == (job.state == "running")
            # Terminal stays terminal; only an operator's reprocess brings a job back.
            was = self.last_states.get(job_id)
            if was in TERMINAL and row["state"] not in TERMINAL:
                assert job_id in self.reprocessed, f"job {job_id} left {was} for {row['state']}"
            self.last_states[job_id] = row["state"]
        self.reprocessed.clear()
        # Per-key ordering: never two running jobs of one key (the claim rule checks the order).
        running_keys = [j.key for j in self.jobs.values() if j.state == "running" and j.key is not None]
        assert len(running_keys) == len(set(running_keys)), running_keys

    @invariant()
    def audit_log_matches_the_model(self) -> None:
        """Every committed write logged exactly what the model expects, and busy or uncommitted
        writes logged nothing."""
        assert self.run(self._event_rows()) == [e for _, e in self.events]

    @invariant()
    def ledger_matches_the_model(self) -> None:
        ledger = self.run(self._effect_rows())
        assert {j: (s, t) for j, (_, s, t) in ledger.items()} == self.effects
        assert {j: i for j, (i, _, _) in ledger.items()} == self.effect_ids
        assert all(n <= 1 for n in self.performed.values()), "an effect was performed twice"

    @invariant()
    def open_transactions_see_their_own_writes(self) -> None:
        for name, txn in self.txns.items():
            if not txn.open:
                continue
            view = self._view(name)
            rows = self.run(self._rows(txn.conn))
            assert set(rows) == set(view), name
            for job_id, job in view.items():
                row = rows[job_id]
                seen = (row["state"], row["attempt_count"], row["lease_token"], row["lease_owner"])
                assert seen == (job.state, job.attempts, job.token, job.owner), (name, job_id, row, job)
            running_keys = [j.key for j in view.values() if j.state == "running" and j.key is not None]
            assert len(running_keys) == len(set(running_keys)), (name, running_keys)


@pytest.mark.slow
def test_lease_state_machine_matches_model(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hundreds of random operation sequences on the real SQL, with row locks and interleaved
    transactions on other connections, agree with the model at every step: one live lease per job,
    growing tokens, inert stale, busy and revoked writes, sticky terminal states, bounded attempts,
    uncounted releases and requeues, ordered keys, effects performed once, lone jobs handed to
    standing offers exactly when nothing waits before them, nothing lost."""
    # Every lone enqueue looks for an offer: the model says which one it takes, whatever came before.
    monkeypatch.setattr(producer_queries, "NO_OFFER_REST", 0.0)
    loop = asyncio.new_event_loop()

    async def connect(autocommit: bool, lock_timeout: str) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            dsn, autocommit=autocommit, options=f"-c lock_timeout={lock_timeout}"
        )

    conn = loop.run_until_complete(connect(True, MAIN_LOCK_TIMEOUT))
    locker = loop.run_until_complete(connect(False, SIDE_LOCK_TIMEOUT))
    workers = {name: loop.run_until_complete(connect(False, SIDE_LOCK_TIMEOUT)) for name in TRANSACTIONS}
    try:
        run_state_machine_as_test(
            lambda: LeaseMachine(loop, conn, locker, workers),
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                database=None,
            ),
        )
    finally:
        for c in (conn, locker, *workers.values()):
            loop.run_until_complete(c.close())
        loop.close()

"""What a producer runs: enqueue (one job, many, keyed), the wake-up notifications after it, and
reading a job and its history. Written once, async; tools/async_to_sync.py writes its blocking twin
(tenure.db.sync.producer_queries), which the blocking client runs."""

from __future__ import annotations

import json
import time
import uuid
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

from tenure.db.channels import SCHEDULED_PREFIX, notify_channel, results_channel
from tenure.db.fetch import Row, fetch, fetch_first
from tenure.db.job_rows import (
    INSERT_RACE,
    INSERT_ROUNDS,
    UNREADABLE,
    InsertRace,
    event_from_row,
    existing_job,
    held_unique_key,
    holder_params,
    idempotency_key_of,
    indexed_key_of,
    insert_columns,
    inserted_job,
    is_keyed,
    is_lone,
    job_from_row,
    payload_json,
    readable_row,
    unique_params,
)
from tenure.db.sqlfiles import named_queries
from tenure.db.wakeups import Wakeups
from tenure.model.jobs import EnqueuedJob, Job, JobEvent, JobSpec
from tenure.model.unique import unique_from

ASYNC = True
#: After a schema or a role without hand-offs was met, how long lone jobs go in without asking
#: again (seconds).
OFFERS_ASKED_AGAIN = 10.0
#: After a lone job of a queue found no offer to take, how long that queue's lone jobs go in
#: without looking for one (seconds): the look costs the insert about 0.13 ms of the server's time
#: (docs/performance.md), and workers busy a moment ago are seldom idle a moment later.
NO_OFFER_REST = 0.25
#: The most bytes of payload and trace context a handed job carries in its notification, whose
#: limit is PostgreSQL's 8000 bytes: the claim's other columns take well under a thousand. A job
#: past it is not handed (it is claimed).
HANDED_PAYLOAD_ROOM = 6000


class ProducerQueries:
    """Typed access to the producer's named queries of one Tenure schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.channel = notify_channel(schema)
        self.results_channel = results_channel(schema)
        self._sql = named_queries(schema)
        #: Per connection: whether its role may insert jobs itself, asked once.
        self._insert_allowed: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        #: Until when (monotonic) lone jobs go in without looking for an offer: a schema before
        #: hand-offs, or a role that may not write a running job, was met (asked again after
        #: OFFERS_ASKED_AGAIN, as a migration or a GRANT may come meanwhile).
        self._no_offers_until = 0.0
        #: Per queue, until when its lone jobs go in without looking for an offer (NO_OFFER_REST).
        self._no_offer_in: dict[str, float] = {}

    def _lone_insert(
        self,
        specs: Sequence[JobSpec],
        now: datetime | None,
        wakeups: Wakeups | None,
        payload_text: str | None = None,
    ) -> tuple[uuid.UUID, dict[str, Any]] | None:
        """The key and job_insert_one's parameters when `specs` is one job without keys (the
        usual enqueue: one job per transaction), else None: job_insert_many's turn."""
        if len(specs) != 1 or not is_lone(specs[0]):
            return None
        spec = specs[0]
        key = idempotency_key_of(spec)
        return key, {
            **insert_columns(spec),
            "payload": payload_json(spec.payload) if payload_text is None else payload_text,
            "idempotency_key": key,
            "run_at": spec.run_at,
            "delay": None if spec.delay is None else float(spec.delay),
            "trace_context": None if spec.trace_context is None else Jsonb(spec.trace_context),
            "channel": self.channel,
            "scheduled_prefix": SCHEDULED_PREFIX,
            "notify": wakeups is None,
            "now": now,
        }

    def _insert_params(
        self,
        specs: Sequence[JobSpec],
        keys: Sequence[uuid.UUID],
        now: datetime | None,
        wakeups: Wakeups | None = None,
    ) -> dict[str, Any]:
        unique = unique_params(specs)
        jobs = []
        for i, spec in enumerate(specs):
            job: dict[str, Any] = {
                **insert_columns(spec),
                "payload": spec.payload,
                "idempotency_key": str(keys[i]),
            }
            # Absent rather than null: ->> reads either as NULL, but -> reads null as JSON null.
            optional = {
                "run_at": None if spec.run_at is None else spec.run_at.isoformat(),
                "delay": spec.delay,
                "ordering_key": spec.ordering_key,
                "unique_key": unique["unique_keys"][i],
                "unique_part": unique["unique_parts"][i],
                "unique_states": unique["unique_states"][i],
                "unique_period": unique["unique_periods"][i],
                "trace_context": spec.trace_context,
            }
            job.update((k, v) for k, v in optional.items() if v is not None)
            jobs.append(job)
        return {
            "jobs": json.dumps(jobs, separators=(",", ":"), ensure_ascii=False),
            "ordering_lock_space": f"tenure.ordering:{self.schema}",
            "channel": self.channel,
            "scheduled_prefix": SCHEDULED_PREFIX,
            "notify": wakeups is None,
            "now": now,
            **unique,
        }

    async def job_insert_many(
        self,
        conn: AsyncConnection[Any],
        specs: Sequence[JobSpec],
        now: datetime | None = None,
        wakeups: Wakeups | None = None,
        payload_text: str | None = None,
        hand_off: bool = False,
    ) -> list[EnqueuedJob]:
        """Stores the jobs, in order. A job whose idempotency key is stored already, or whose
        unique key another job holds, comes back as that job (`existing`) and is not stored.
        Give `conn` a transaction when `specs` mixes such jobs with others (several statements).

        The statements notify the jobs' queues, unless `wakeups` is given: then they notify
        nothing and add what to notify to it, for the caller to send once it has committed.

        A role that may not insert jobs itself (the producer role) enqueues through the
        database's enqueue() instead, which checks and completes each job (docs/sql.md).

        `payload_text`: one job's payload as the client's checks encoded it (compact JSON), sent
        as it is rather than encoded again.

        `hand_off`: a lone job due now, committed on its own, whose queue was at rest, may be
        handed to an idle worker's standing offer in its insert (job_hand_off, docs/hand-off.md)."""
        if not await self.may_insert(conn):
            keys = [indexed_key_of(s) for s in specs]
            rows = await fetch(conn, self._sql["job_enqueue_call"], self._call_params(specs, keys, wakeups))
            return self._called(rows, specs, keys, wakeups)
        if lone := self._lone_insert(specs, now, wakeups, payload_text):
            inserted = await self._hand_off(conn, lone[1]) if hand_off else None
            handed = inserted is not None and bool(inserted[4])
            if inserted is None:
                inserted = await fetch_first(conn, self._sql["job_insert_one"], lone[1])
                assert inserted is not None  # an insert without a conflict arbiter returns its row
            job_id, available_at, scheduled = inserted[:3]
            return [inserted_job(job_id, available_at, scheduled, lone[0], specs[0], wakeups, handed=handed)]
        out: list[EnqueuedJob | None] = [None] * len(specs)
        plain = [i for i, s in enumerate(specs) if not is_keyed(s)]
        if plain:
            keys = [idempotency_key_of(specs[i]) for i in plain]
            params = self._insert_params([specs[i] for i in plain], keys, now, wakeups)
            rows = await fetch(conn, self._sql["job_insert_many"], params)
            for i, row, key in zip(plain, rows, keys, strict=True):
                out[i] = inserted_job(
                    row["id"], row["available_at"], row["scheduled"], key, specs[i], wakeups
                )
        for i, spec in enumerate(specs):
            if out[i] is None:
                out[i] = await self._insert_keyed(conn, spec, now, wakeups)
        return [job for job in out if job is not None]

    async def _hand_off(self, conn: AsyncConnection[Any], params: dict[str, Any]) -> tuple[Any, ...] | None:
        """job_hand_off's row for a lone job (`params`: job_insert_one's); None when this client
        does not look for an offer now: the schema or role has none, or the job's queue found none
        a moment ago (NO_OFFER_REST)."""
        queue, now = params["queue"], time.monotonic()
        if now < self._no_offers_until or now < self._no_offer_in.get(queue, 0.0):
            return None
        try:
            params = {**params, "notify_room": HANDED_PAYLOAD_ROOM}
            inserted = await fetch_first(conn, self._sql["job_hand_off"], params)
        except (errors.UndefinedTable, errors.InsufficientPrivilege):
            # A schema before hand-offs (0030), or a role that may not write a running job: its
            # jobs are claimed, as before.
            self._no_offers_until = time.monotonic() + OFFERS_ASKED_AGAIN
            return None
        assert inserted is not None  # an insert without a conflict arbiter returns its row
        if inserted[4]:
            self._no_offer_in.pop(queue, None)
        else:
            self._no_offer_in[queue] = time.monotonic() + NO_OFFER_REST
        return inserted

    async def may_insert(self, conn: AsyncConnection[Any]) -> bool:
        """Whether `conn`'s role may insert jobs itself (else it enqueues through enqueue())."""
        allowed = self._insert_allowed.get(conn)
        if allowed is None:
            rows = await fetch(conn, self._sql["jobs_insert_allowed"], {})
            allowed = self._insert_allowed[conn] = bool(rows[0]["allowed"])
        return allowed

    def _call_params(
        self, specs: Sequence[JobSpec], keys: Sequence[uuid.UUID], wakeups: Wakeups | None
    ) -> dict[str, Any]:
        return {"jobs": self._insert_params(specs, keys, None, wakeups)["jobs"], "notify": wakeups is None}

    def _called(
        self,
        rows: Sequence[Row],
        specs: Sequence[JobSpec],
        keys: Sequence[uuid.UUID],
        wakeups: Wakeups | None,
    ) -> list[EnqueuedJob]:
        """EnqueuedJobs of enqueue()'s rows, each new job with the key drawn here and sent with it.
        The role reads no idempotency keys: a job that existed comes back with the caller's own
        key when the caller gave one, else, found by its unique key, without (as for any role)."""
        out = []
        for row, spec, key in zip(rows, specs, keys, strict=True):
            unique = unique_from(spec.unique)
            known = not row["existing"] or spec.idempotency_key is not None
            held = None if unique is None else unique.key_for(spec.task, spec.payload)
            if wakeups is not None and not row["existing"]:
                wakeups.add(spec.queue or "default", row["available_at"], row["scheduled"])
            out.append(
                EnqueuedJob(row["id"], key if known else None, row["available_at"], row["existing"], held)
            )
        return out

    async def _insert_keyed(
        self, conn: AsyncConnection[Any], spec: JobSpec, now: datetime | None, wakeups: Wakeups | None
    ) -> EnqueuedJob:
        key = idempotency_key_of(spec)
        params = self._insert_params([spec], [key], now, wakeups)
        for _ in range(INSERT_ROUNDS):
            rows = await fetch(conn, self._sql["job_insert_many"], params)
            if rows:
                first, held = rows[0], held_unique_key(params)
                return inserted_job(
                    first["id"], first["available_at"], first["scheduled"], key, spec, wakeups, held
                )
            holder = await fetch(conn, self._sql["job_find_holder"], holder_params(params, key))
            if holder:
                return existing_job(holder[0], key, held_unique_key(params))
        raise InsertRace(INSERT_RACE)

    def _notify_params(
        self, queues: Sequence[str], first_scheduled: datetime | None, after_commit: bool
    ) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "queues": list(queues),
            "first_scheduled": first_scheduled,
            "scheduled_prefix": SCHEDULED_PREFIX,
            "after_commit": after_commit,
        }

    async def queue_notify(
        self,
        conn: AsyncConnection[Any],
        queues: Sequence[str],
        first_scheduled: datetime | None = None,
        *,
        after_commit: bool = False,
    ) -> None:
        """Wakes the queues' listeners, and promoters for a job scheduled at `first_scheduled`.
        `after_commit`: a transaction of its own (only where tenure.db.wakeups.owns_commit),
        committed without waiting for its flush."""
        params = self._notify_params(queues, first_scheduled, after_commit)
        await fetch(conn, self._sql["queue_notify"], params)

    async def notify_wakeups(
        self, conn: AsyncConnection[Any], wakeups: Wakeups, *, after_commit: bool
    ) -> None:
        """Sends `wakeups`: in the current transaction, or `after_commit` of the jobs' own."""
        if wakeups:
            await self.queue_notify(
                conn, sorted(wakeups.queues), wakeups.first_scheduled, after_commit=after_commit
            )

    async def job_get(self, conn: AsyncConnection[Any], job_id: int) -> Job | None:
        """The job as stored. A row whose JSON this client cannot read (set aside by the claim as
        UNREADABLE_ROW) still comes back, with those values empty and `unreadable` saying why."""
        try:
            rows = await fetch(conn, self._sql["job_get"], {"id": job_id})
        except UNREADABLE:
            async with conn.cursor(row_factory=dict_row) as cur:
                cur.adapters.register_loader("jsonb", TextLoader)
                await cur.execute(self._sql["job_get"], {"id": job_id})
                rows = [readable_row(r) for r in await cur.fetchall()]
        return job_from_row(rows[0]) if rows else None

    async def jobs_matching(
        self,
        conn: AsyncConnection[Any],
        *,
        tasks: Sequence[str] | None,
        queue: str | None,
        states: Sequence[str],
        contains: dict[str, Any] | None,
        limit: int = 1000,
    ) -> list[Job]:
        """Jobs by task, queue, state and payload, oldest first (tenure.testing's assertions)."""
        params = {
            "tasks": None if tasks is None else list(tasks),
            "queue": queue,
            "states": list(states),
            "contains": None if contains is None else Jsonb(contains),
            "limit": limit,
        }
        return [job_from_row(r) for r in await fetch(conn, self._sql["jobs_matching"], params)]

    async def job_events_list(self, conn: AsyncConnection[Any], job_id: int) -> list[JobEvent]:
        rows = await fetch(conn, self._sql["job_events_list"], {"job_id": job_id})
        return [event_from_row(r) for r in rows]

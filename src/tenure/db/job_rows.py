"""Jobs to rows and rows to jobs: the values the producer's statements take and give back, the
same for the async statements and their blocking twins."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from tenure.db.fetch import Row
from tenure.db.wakeups import Wakeups
from tenure.model.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    EnqueuedJob,
    Job,
    JobEvent,
    JobSpec,
    JobState,
)
from tenure.model.keys import generated_key
from tenure.model.unique import held_key, unique_from


def readable_row(row: Row) -> Row:
    """A job row read with its JSON as text: each value decoded where it can be, and emptied,
    with the reason in `unreadable`, where it cannot."""
    problems = []
    for column, empty in (("payload", {}), ("progress", None), ("result", None)):
        text = row.get(column)
        if text is None:
            continue
        try:
            row[column] = json.loads(text)
        except UNREADABLE as exc:
            row[column] = empty
            problems.append(f"its {column} ({len(text):,} characters of JSON): {type(exc).__name__}: {exc}")
    row["unreadable"] = "; ".join(problems) or None
    return row


def job_from_row(row: Row) -> Job:
    return Job(**{**row, "state": JobState(row["state"])})


#: What reading one claimed row can raise when a value in it cannot be read by this client.
UNREADABLE = (psycopg.DataError, ValueError, RecursionError)


#: The error code of a claimed job whose row could not be read, set aside as dead unrun.
UNREADABLE_ROW = "UNREADABLE_ROW"


#: How often an enqueue tries again for a job whose key-holder finished between its insert and
#: the lookup of that holder (each time the key was held, and then no longer).
INSERT_ROUNDS = 5


#: Caller-given idempotency keys that are strings become UUIDs in this namespace.
IDEMPOTENCY_NAMESPACE = uuid.UUID("6f2c1d9e-4b7a-5e8f-9a3b-2d1c0e4f5a6b")


def idempotency_key_of(spec: JobSpec) -> uuid.UUID:
    given = spec.idempotency_key
    if given is None:
        return generated_key()
    if isinstance(given, uuid.UUID):
        return given
    return uuid.uuid5(IDEMPOTENCY_NAMESPACE, given)


def indexed_key_of(spec: JobSpec) -> uuid.UUID:
    """The key of a job sent through the database's enqueue() (the producer role's way in): the
    caller's own, else a random version 4 key, which the unique index holds as it holds a chosen
    one. enqueue() refuses a generated key's form: a role that may not insert jobs itself may not
    give a job a key that no index checks, such as another job's key learned elsewhere."""
    return uuid.uuid4() if spec.idempotency_key is None else idempotency_key_of(spec)


def is_lone(spec: JobSpec) -> bool:
    """Whether `spec` alone goes through job_insert_one: no key that could meet a stored job
    or that orders it behind others (those need job_insert_many's arbiters and locks)."""
    return spec.ordering_key is None and not is_keyed(spec)


def insert_columns(spec: JobSpec) -> dict[str, Any]:
    """The columns both insert statements take from `spec` as they are. The client hands over
    complete specs (resolved against the task registry; an unknown task refused without a
    queue); a spec written here directly, as tests and internal tools do, takes the 'default'
    queue and the columns' defaults."""
    return {
        "queue": spec.queue or "default",
        "task": spec.task,
        "priority": DEFAULT_PRIORITY if spec.priority is None else spec.priority,
        "max_attempts": DEFAULT_MAX_ATTEMPTS if spec.max_attempts is None else spec.max_attempts,
        "result_wanted": spec.result_wanted,
    }


def is_keyed(spec: JobSpec) -> bool:
    """Whether an insert of `spec` can meet a stored key (unique, or the caller's own key)."""
    return spec.idempotency_key is not None or (spec.unique is not None and spec.unique is not False)


class InsertRace(RuntimeError):
    """A job's unique key was held at its insert and free at the lookup, round after round."""


def event_from_row(row: Row) -> JobEvent:
    return JobEvent(
        **{
            **row,
            "from_state": JobState(row["from_state"]) if row["from_state"] else None,
            "to_state": JobState(row["to_state"]) if row["to_state"] else None,
        }
    )


INSERT_RACE = (
    f"the job's unique key was held when it was inserted and free when its holder was looked up, "
    f"{INSERT_ROUNDS} times in a row: its holders finish as fast as it is enqueued; try again"
)


def holder_params(insert: dict[str, Any], key: uuid.UUID) -> dict[str, Any]:
    """job_find_holder's parameters for the one job of `insert` (job_insert_many's)."""
    return {
        "idempotency_key": key,
        "unique_key": insert["unique_keys"][0],
        "unique_period": insert["unique_periods"][0],
        "now": insert["now"],
    }


def held_unique_key(insert: dict[str, Any]) -> str | None:
    """The unique key of the one job of `insert`, as `tenure unique show` takes it (a period's
    window number, which the database's clock decides, is stored after it as '@N')."""
    key: str | None = insert["unique_keys"][0]
    return key


def inserted_job(
    job_id: int,
    available_at: datetime,
    scheduled: bool,
    key: uuid.UUID,
    spec: JobSpec,
    wakeups: Wakeups | None,
    unique_key: str | None = None,
    handed: bool = False,
) -> EnqueuedJob:
    """The job an insert stored (its id, run time, whether it went in scheduled, and whether it
    took a worker's offer), with what its commit must notify added to `wakeups`."""
    if wakeups is not None:
        wakeups.add(spec.queue or "default", available_at, scheduled)
    return EnqueuedJob(job_id, key, available_at, False, unique_key, handed)


def existing_job(row: Row, key: uuid.UUID, unique_key: str | None) -> EnqueuedJob:
    # Found by its unique key, the job has an idempotency key of its own, not ours to read.
    return EnqueuedJob(
        row["id"], key if row["by_idempotency_key"] else None, row["available_at"], True, unique_key
    )


def unique_params(specs: Sequence[JobSpec]) -> dict[str, list[Any]]:
    """Each spec's unique key (before its period's window is appended), scope and period."""
    keys: list[str | None] = []
    parts: list[str | None] = []
    states: list[str | None] = []
    periods: list[float | None] = []
    for spec in specs:
        unique = unique_from(spec.unique)
        if unique is None:
            keys.append(None)
            parts.append(None)
            states.append(None)
            periods.append(None)
            continue
        part = unique.part_for(spec.task, spec.payload)
        parts.append(part)
        keys.append(held_key(spec.task, part))
        states.append("{" + ",".join(sorted(s.value for s in unique.states)) + "}")
        periods.append(None if unique.period is None else float(unique.period))
    return {"unique_keys": keys, "unique_parts": parts, "unique_states": states, "unique_periods": periods}


def payload_json(payload: dict[str, Any]) -> str:
    """The exact JSON text Tenure stores for a payload (used by COPY)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)

"""Turning enqueue calls into complete, checked jobs: the task's policy filled in, the payload
fitted to its handler, and the rows COPY sends. Both clients build their jobs here."""

from __future__ import annotations

import difflib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Unpack

from tenure.db.wakeups import Wakeups
from tenure.model.errors import UnknownTask, ValidationError
from tenure.model.jobs import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, JobSpec, JobState
from tenure.model.keys import is_generated
from tenure.model.secrets import CredentialPolicy, check_credentials, credential_policy_from
from tenure.model.unique import unique_from
from tenure.model.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_spec_json
from tenure.tasks import ENQUEUE_OPTIONS, AnyTask, EnqueueOptions, Task, TaskRegistry

# The state goes as text: in COPY's binary format an enum value is its label's bytes.
#: The payload goes as jsonb's binary form, prepared by hand (see CopyRows): to psycopg, bytes.
COPY_TYPES = ["text", "text", "bytea", "int2", "timestamptz", "text", "int4", "bool"]
JSONB_BINARY_VERSION = b"\x01"
OPTION_NAMES = frozenset(ENQUEUE_OPTIONS)


class JobBuilder:
    """Turns enqueue calls into complete, validated JobSpecs.

    A task the registry knows gives its queue, priority and max_attempts to every option left
    as None, and its handler's signature is checked against the payload. A task it does not know
    is enqueued by name only when the caller names the queue: nothing is sent to a default
    queue no worker may serve.
    """

    def __init__(
        self,
        registry: TaskRegistry | None,
        max_payload_bytes: int,
        credential_policy: CredentialPolicy | str = CredentialPolicy.WARN,
    ) -> None:
        self.registry = registry
        self.max_payload_bytes = max_payload_bytes
        self.credential_policy = credential_policy_from(credential_policy)

    def check(self, spec: JobSpec, task: AnyTask | None = None) -> JobSpec:
        """The spec completed from its task's policy and validated, ready to write (a copy: the
        caller's spec is not changed). Applies the credential policy."""
        return self.check_json(spec, task)[0]

    def check_json(
        self, spec: JobSpec, task: AnyTask | None = None, *, filled: tuple[str, ...] = ()
    ) -> tuple[JobSpec, str]:
        """`check`, and the payload's compact JSON text (what COPY sends). `filled`: arguments
        the payload gets later (a workflow step's input), checked as the handler's own."""
        known = task or (self.registry.get(spec.task) if self.registry is not None else None)
        if known is not None and known.codec is not None:
            # Arguments of types JSON lacks (datetime, Decimal, a dataclass...) go as JSON.
            try:
                spec = replace(spec, payload=known.codec.encode(spec.payload))
            except ValidationError as exc:
                raise ValidationError(f"payload does not fit task {spec.task!r}: {exc}") from None
        payload_text = check_spec_json(spec, max_payload_bytes=self.max_payload_bytes)
        queue, priority, max_attempts = spec.queue, spec.priority, spec.max_attempts
        unique_option = spec.unique
        if known is not None:
            mismatch = known.accepts(spec.payload, filled=filled)
            if mismatch:
                raise ValidationError(
                    f"payload does not fit task {spec.task!r}: {mismatch}; "
                    f"pass the handler's keyword arguments ({known.parameters()})"
                )
            policy = known.policy
            queue = policy.queue if queue is None else queue
            priority = policy.priority if priority is None else priority
            max_attempts = policy.max_attempts if max_attempts is None else max_attempts
            unique_option = policy.unique if unique_option is None else unique_option
        elif queue is None:
            raise self._unknown(spec.task)
        else:
            priority = DEFAULT_PRIORITY if priority is None else priority
            max_attempts = DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
        check_credentials(spec.payload, self.credential_policy)
        unique = unique_from(unique_option)  # refuses a bad value, or a payload without its fields
        if unique is not None:
            unique.key_for(spec.task, spec.payload)
        check_idempotency_key(spec.idempotency_key)
        # One copy with every option filled in: enqueue_copy checks each of its jobs this way.
        complete = spec.completed(queue, priority, max_attempts, unique)
        return complete, payload_text

    def _unknown(self, name: str) -> UnknownTask:
        by_name = (
            "or pass queue=... to enqueue it by name (the queue a worker that has the task serves; "
            "no task policy is applied and the payload is not checked)"
        )
        if self.registry is None or not len(self.registry):
            return UnknownTask(
                f"task {name!r} is unknown to this client, which has no registered tasks: enqueue "
                f"through the tenure.Tenure app that registers it, {by_name}"
            )
        return UnknownTask(
            f"task {name!r} is not registered in this app ({known_tasks_hint(self.registry, name)}): "
            f"import the module that defines it before enqueueing, {by_name}"
        )

    def spec(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        ordering_key: str | None = None,
        result_wanted: bool = False,
        unique: Any = None,
        idempotency_key: uuid.UUID | str | None = None,
    ) -> JobSpec:
        """A complete spec for one job; options left as None come from the task's policy.

        Args:
            task: the task, or its registered name.
            payload: the handler's keyword arguments, as JSON.
            queue: the queue; required for a task this client's registry does not know.
            priority: higher runs first.
            delay: seconds (or a timedelta) from now before the job may run.
            run_at: when the job may run; give `delay` or `run_at`, not both.
            max_attempts: runs before the job is dead.
            ordering_key: jobs sharing a key run one at a time, in enqueue order.
            result_wanted: a caller will wait for the result: the job's finish notifies at once.
            unique: a tenure.Unique, a key string or True (by the whole payload); False: not
                unique, whatever the task's policy.
            idempotency_key: the caller's own key for this enqueue: a retry after an ambiguous
                commit returns the job the first attempt stored.
        """
        return self.spec_json(
            task,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            ordering_key=ordering_key,
            result_wanted=result_wanted,
            unique=unique,
            idempotency_key=idempotency_key,
        )[0]

    def spec_json(
        self, task: str | AnyTask, payload: dict[str, Any] | None = None, **options: Unpack[EnqueueOptions]
    ) -> tuple[JobSpec, str]:
        """`spec`, and the payload's compact JSON text as its checks encoded it (what the insert
        sends as it is, rather than encoding it again)."""
        if unknown := options.keys() - OPTION_NAMES:  # typed callers cannot, others can
            raise TypeError(
                f"unknown enqueue option(s) {', '.join(map(repr, sorted(unknown)))}: "
                f"the options are {', '.join(ENQUEUE_OPTIONS)}"
            )
        delay = options.get("delay")
        fields: dict[str, Any] = {
            **options,
            "delay": delay.total_seconds() if isinstance(delay, timedelta) else delay,
        }
        name = task.name if isinstance(task, Task) else task
        spec = JobSpec(task=name, payload={} if payload is None else payload, **fields)
        return self.check_json(spec, task if isinstance(task, Task) else None)


def known_tasks_hint(registry: TaskRegistry, name: str) -> str:
    """'did you mean ...' with the closest registered names, else the registered names."""
    names = sorted(t.name for t in registry)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(map(repr, close)) + "?"
    shown = ", ".join(map(repr, names[:10]))
    more = f" and {len(names) - 10} more" if len(names) > 10 else ""
    return f"registered: {shown}{more}"


class CopyRows:
    """COPY rows of `specs`, each checked as it is written (a spec that fails aborts the COPY,
    and its transaction writes nothing), and what to notify once they are written (`wakeups`;
    a job due later than `db_now` is scheduled, as job_insert_many decides). Checking while the
    server takes the rows already sent lets the two work at once."""

    def __init__(self, builder: JobBuilder, specs: Sequence[JobSpec], db_now: datetime) -> None:
        self.builder = builder
        self.specs = specs
        self.db_now = db_now
        self.wakeups = Wakeups()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        db_now = self.db_now
        for spec in self.specs:
            s, payload_text = self.builder.check_json(spec)
            refuse_ordering_keys([s])
            available = s.run_at or (db_now + timedelta(seconds=s.delay or 0))
            scheduled = available > db_now
            state = JobState.SCHEDULED.value if scheduled else JobState.PENDING.value
            self.wakeups.add(s.queue or "default", available, scheduled)
            yield (
                s.queue,
                s.task,
                # jsonb's binary input is a version byte and the JSON text: the text the payload
                # check measured, sent as it is rather than encoded a second time.
                JSONB_BINARY_VERSION + payload_text.encode("utf-8"),
                s.priority,
                available,
                state,
                s.max_attempts,
                s.result_wanted,
            )


def copy_rows(specs: Sequence[JobSpec], db_now: datetime) -> CopyRows:
    """COPY rows of specs that name their queue, checked as a client with no registry checks
    them (the benchmark's bare-COPY baseline writes these)."""
    return CopyRows(JobBuilder(None, DEFAULT_MAX_PAYLOAD_BYTES), specs, db_now)


def refuse_ordering_keys(specs: Sequence[JobSpec]) -> None:
    """COPY cannot take the per-key enqueue locks that keep a key's ids in commit order, and
    has no ON CONFLICT: one job meeting a held unique key or a stored idempotency key would
    abort the whole load. Such jobs go through enqueue_many."""
    if any(s.ordering_key is not None for s in specs):
        raise ValidationError(
            "enqueue_copy does not accept jobs with an ordering_key; enqueue them with enqueue_many"
        )
    if any(s.unique is not None or s.idempotency_key is not None for s in specs):
        raise ValidationError(
            "enqueue_copy does not accept unique jobs or caller idempotency keys: COPY cannot skip a "
            "job whose key is taken, so one such job would abort the whole load; use enqueue_many"
        )


def check_idempotency_key(key: object) -> None:
    if key is None:
        return
    if isinstance(key, uuid.UUID):
        if is_generated(key):
            raise ValidationError(
                f"idempotency_key {key} is a version 8 UUID, the form of the keys Tenure generates for "
                "jobs without one, which the database does not keep unique: give a UUID of another "
                "version (uuid.uuid4()) or a string"
            )
        return
    if not isinstance(key, str) or not 1 <= len(key) <= 500:
        raise ValidationError(
            f"idempotency_key must be a UUID or a string of 1 to 500 characters, got {key!r}"
        )

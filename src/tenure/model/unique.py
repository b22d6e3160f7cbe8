"""Unique jobs: at most one job per key while it is in the states of its scope.

The key comes from chosen payload fields, or is given; it is scoped to the task. The database
enforces it (a unique partial index over `unique_key` where the job's state is one of its own
`unique_states`), so it holds for any number of concurrent producers, inside the caller's
transaction too. An enqueue that meets a job holding its key returns that job instead
(`EnqueuedJob.existing`).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tenure.model.errors import ConfigurationError, ValidationError
from tenure.model.jobs import JobState

#: Named scopes: the states in which a job holds its key.
SCOPES: dict[str, frozenset[JobState]] = {
    # Queued or running: a new job is allowed once the last one finished, however it ended.
    "active": frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.RUNNING}),
    # Until it succeeds (or is cancelled): a dead job still holds its key, for someone to look at.
    "unfinished": frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.RUNNING, JobState.DEAD}),
    # Ever, until retention deletes the finished job.
    "ever": frozenset(JobState) - {JobState.CANCELLED, JobState.WAITING},
}
# No scope names waiting: a job that waits (for a signal or a time) adds it to the states it holds
# its key in as it begins to wait, as every scope holds the key while running. Producers and
# workers of versions before waits then agree on every scope.
#: Every scope holds the key from enqueue until the job stops running: a job that goes back to
#: waiting (a retry, a lease recovered, a snooze, a graceful release) must never meet another
#: job holding its key, which it would if running did not hold it.
_REQUIRED = SCOPES["active"]
#: Longer keys are stored as a digest, to keep the index's entries small.
MAX_PLAIN_KEY = 400


@dataclass(frozen=True)
class Unique:
    """How a task's jobs are unique: by `fields` of the payload (all of it when both are None)
    or an explicit `key`; while in the states of `scope` (a name of SCOPES, or states); and,
    with `period` seconds, once per window of that length (database time)."""

    fields: tuple[str, ...] | None = None
    key: str | None = None
    scope: str | Iterable[JobState | str] = "active"
    period: float | None = None

    def __post_init__(self) -> None:
        if self.fields is not None:
            if isinstance(self.fields, str) or not all(isinstance(f, str) and f for f in self.fields):
                raise ConfigurationError(
                    f"Unique fields must be a tuple of payload field names, got {self.fields!r}; "
                    "for example Unique(fields=('customer_id',))"
                )
            object.__setattr__(self, "fields", tuple(self.fields))
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise ConfigurationError(f"Unique key must be a non-empty string, got {self.key!r}")
        if self.key is not None and self.fields is not None:
            raise ConfigurationError("give Unique either fields or a key, not both")
        object.__setattr__(self, "scope", frozenset(self.states))
        period = self.period
        if period is not None and (
            isinstance(period, bool)
            or not isinstance(period, numbers.Real)
            or not math.isfinite(period)
            or period <= 0
        ):
            raise ConfigurationError(f"Unique period must be a positive number of seconds, got {period!r}")

    @property
    def states(self) -> frozenset[JobState]:
        scope = self.scope
        if isinstance(scope, str):
            if scope not in SCOPES:
                raise ConfigurationError(
                    f"unknown unique scope {scope!r}: use one of {', '.join(sorted(SCOPES))}, "
                    "or a set of states"
                )
            return SCOPES[scope]
        try:
            states = frozenset(JobState(s) for s in scope)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"unique scope {scope!r} names an unknown state ({exc})") from None
        if JobState.CANCELLED in states:
            raise ConfigurationError(
                "a unique scope may not include cancelled: a cancelled job never holds its key, so an "
                "operator's cancel always frees it (the database refuses such a scope too)"
            )
        if not states >= _REQUIRED:
            raise ConfigurationError(
                "a unique scope must include scheduled, pending and running (a job holds its key from "
                "enqueue until it stops running, so a retry never meets another job holding it), "
                f"got {sorted(s.value for s in states)}"
            )
        return states

    def key_for(self, task: str, payload: dict[str, Any]) -> str:
        """The key a job of `task` with `payload` holds."""
        return held_key(task, self.part_for(task, payload))

    def part_for(self, task: str, payload: dict[str, Any]) -> str:
        """The key's own part, before it is scoped to the task (what enqueue() takes in SQL)."""
        if self.key is not None:
            return self.key
        if self.fields is None:
            chosen = payload
        else:
            missing = [f for f in self.fields if f not in payload]
            if missing:
                raise ValidationError(
                    f"task {task!r} is unique by {list(self.fields)}, but the payload has no "
                    f"{', '.join(map(repr, missing))}: include them, or give the key (unique=...)"
                )
            chosen = {f: payload[f] for f in self.fields}
        return json.dumps(chosen, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def held_key(task: str, part: str) -> str:
    """The key a job of `task` holds for key part `part`: scoped to its task, so no task's job
    can hold another task's key (the database checks the prefix), and a digest when long. The
    database's unique_held_key() says the same."""
    key = f"{task}:{part}"
    if len(key) > MAX_PLAIN_KEY:
        key = f"{task[:200]}:sha256:{hashlib.sha256(part.encode()).hexdigest()}"
    return key


def unique_from(value: Unique | str | bool | None) -> Unique | None:
    """What `unique=` at enqueue or on a task means: a Unique; a string is an explicit key;
    True is unique by the whole payload; None or False is not unique."""
    if value is None or value is False:
        return None
    if value is True:
        return Unique()
    if isinstance(value, str):
        return Unique(key=value)
    if isinstance(value, Unique):
        return value
    raise ConfigurationError(
        f"unique must be a tenure.Unique, a key string, True or None, got {value!r}; for example "
        "unique=tenure.Unique(fields=('order_id',))"
    )

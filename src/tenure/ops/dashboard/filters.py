"""Reading the pages' filters from a query string: each value checked, bounded and typed, with a
message for the operator when it cannot be used."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from tenure.db.ops_rows import DeadFilter
from tenure.model.jobs import JobState
from tenure.ops.dashboard.queries import JobFilter
from tenure.ops.views.durations import duration

MAX_CONTAINS_BYTES = 4096
MAX_TEXT_FILTER = 200
STATES = [s.value for s in JobState]
JOB_FIELDS = ("queue", "task", "state", "error_code", "ordering_key", "older_than", "newer_than", "payload")
DEAD_FIELDS = ("queue", "task", "error_code", "older_than")


class BadFilter(ValueError):
    """A filter the page cannot run; its message is shown to the operator."""


def _text(query: Mapping[str, str], name: str) -> str | None:
    value = query.get(name, "").strip()
    if len(value) > MAX_TEXT_FILTER:
        raise BadFilter(f"the {name.replace('_', ' ')} filter is longer than {MAX_TEXT_FILTER} characters")
    return value or None


def _age(query: Mapping[str, str], name: str) -> float | None:
    text = _text(query, name)
    if text is None:
        return None
    try:
        return duration(text)
    except argparse.ArgumentTypeError as exc:
        raise BadFilter(f"{name.replace('_', ' ')}: {exc}") from None


def _contains(query: Mapping[str, str]) -> dict[str, Any] | None:
    raw = query.get("payload", "").strip()
    if not raw:
        return None
    if len(raw.encode()) > MAX_CONTAINS_BYTES:
        raise BadFilter(f"the payload filter is larger than {MAX_CONTAINS_BYTES} bytes")
    try:
        contains = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadFilter(f"the payload filter is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(contains, dict):
        raise BadFilter('the payload filter must be a JSON object, like {"customer_id": 7}')
    return contains


def job_filter(query: Mapping[str, str]) -> JobFilter:
    state = _text(query, "state")
    if state is not None and state not in STATES:
        raise BadFilter(f"state {state!r} is unknown: choose one of {', '.join(STATES)}")
    before = None
    raw_before = query.get("before", "").strip()
    if raw_before:
        if not raw_before.isdigit() or len(raw_before) > 19:
            raise BadFilter("before must be a job id")
        before = int(raw_before)
    return JobFilter(
        queue=_text(query, "queue"),
        task=_text(query, "task"),
        state=state,
        error_code=_text(query, "error_code"),
        ordering_key=_text(query, "ordering_key"),
        older_than=_age(query, "older_than"),
        newer_than=_age(query, "newer_than"),
        contains=_contains(query),
        before=before,
    )


def dead_filter(query: Mapping[str, str]) -> DeadFilter:
    return DeadFilter(
        queue=_text(query, "queue"),
        task=_text(query, "task"),
        error_code=_text(query, "error_code"),
        older_than=_age(query, "older_than"),
    )


def form_of(query: Mapping[str, str], fields: tuple[str, ...]) -> dict[str, str]:
    """The filters as typed, to refill the form and carry into links."""
    return {k: query.get(k, "") for k in fields}

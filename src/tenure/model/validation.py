"""Checks applied to every job before anything is written, so a rejection leaves no trace."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from tenure.model.errors import ValidationError
from tenure.model.jobs import JobSpec

QUEUE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")
SCHEMA_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,40}")
MAX_TASK_NAME = 200
MAX_PAYLOAD_DEPTH = 64
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
PRIORITY_RANGE = (-32768, 32767)
MAX_ATTEMPTS_LIMIT = 1000
#: Run times the database accepts (the jobs_times_in_range constraint): every worker can read them.
RUN_AT_RANGE = (datetime(1900, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))
MAX_DELAY_SECONDS = 100 * 366 * 86400  # far enough for any schedule, well inside PostgreSQL's range

#: Compact JSON, made once: json.dumps with any argument of its own makes a new encoder each call.
COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _check_name(value: object, pattern: re.Pattern[str], kind: str, rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValidationError(f"invalid {kind} name {value!r}: {rule}")
    return value


def check_queue(queue: object) -> str:
    return _check_name(
        queue,
        QUEUE_PATTERN,
        "queue",
        "use 1-63 letters, digits or '_.:-', starting with a letter or digit "
        "(for example 'emails' or 'billing.v2')",
    )


def check_schema_name(schema: object) -> str:
    return _check_name(
        schema,
        SCHEMA_PATTERN,
        "schema",
        "use lower-case letters, digits and '_', starting with a letter (for example 'tenure')",
    )


def check_task_name(task: object) -> str:
    if not isinstance(task, str) or not task or len(task) > MAX_TASK_NAME:
        raise ValidationError(
            f"invalid task name {task!r}: give a non-empty string of at most {MAX_TASK_NAME} characters"
        )
    if "\x00" in task or not task.isprintable():
        raise ValidationError(f"invalid task name {task!r}: it contains control characters; remove them")
    _check_text(task, "task name")
    return task


def _check_text(text: str, where: str) -> None:
    if "\x00" in text:
        raise ValidationError(
            f"{where} contains a NUL character (\\u0000), which PostgreSQL cannot store; "
            "remove it or encode the value (for example base64)"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"{where} is not valid UTF-8 ({exc.reason} at position {exc.start}); "
            "decode bytes before enqueueing, or encode binary data as base64"
        ) from None


def _check_float(value: float, path: str) -> None:
    """jsonb keeps numbers as decimals: a float of 1e16 or more comes back as the integer its
    shortest repr spells, which for most such floats is a different number."""
    if abs(value) < 1e16:
        return
    back = int(Decimal(repr(value)))
    if back != value:
        raise ValidationError(
            f"{path} is the float {value!r}, which jsonb would give back as the different number {back}; "
            "send it as an int or a string"
        )


def check_payload(payload: object, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """Accepts a JSON object that PostgreSQL's jsonb stores exactly; rejects anything else."""
    payload_json(payload, max_bytes=max_bytes)
    assert isinstance(payload, dict)
    return payload


def payload_json(payload: object, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """`check_payload`, returning the payload's compact JSON text (measured for the size limit,
    so COPY can send it as it is instead of encoding it again)."""
    if not isinstance(payload, dict):
        raise ValidationError(
            f"payload must be a JSON object (a dict of keyword arguments), got {type(payload).__name__}"
        )
    if not _plainly_storable(payload):
        _check_values(payload)  # raises, naming the value, unless the doubt was unfounded
    text = COMPACT_JSON.encode(payload)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        _check_values(payload)  # names the string that is not valid UTF-8
        raise ValidationError(
            f"payload is not valid UTF-8 ({exc.reason}); decode bytes before enqueueing"
        ) from None
    if size > max_bytes:
        raise ValidationError(
            f"payload is {size} bytes, over the limit of {max_bytes}; store large data elsewhere "
            "and enqueue a reference to it, or raise max_payload_bytes"
        )
    return text


def _plainly_storable(payload: dict[str, Any]) -> bool:
    """Whether every value of `payload` is one jsonb stores exactly, found without naming any
    value's path (the usual case, walked at every enqueue). False: some value needs a closer look
    (_check_values). Strings' UTF-8 is checked once, on the whole JSON text."""
    stack: list[tuple[object, int]] = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            return False
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or "\x00" in key:
                    return False
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            if "\x00" in value:
                return False
        elif isinstance(value, float):
            if not (abs(value) < 1e16):  # also NaN
                return False
        elif not (value is None or isinstance(value, bool | int)):
            return False
    return True


def _check_values(payload: dict[str, Any]) -> None:
    """Raises a ValidationError naming the first value of `payload` that jsonb cannot store
    exactly, or a string that is not valid UTF-8; returns if there is none."""
    stack: list[tuple[object, str, int]] = [(payload, "payload", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise ValidationError(
                f"{path} is nested deeper than {MAX_PAYLOAD_DEPTH} levels; flatten the payload"
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ValidationError(
                        f"{path} has a key {key!r} of type {type(key).__name__}; JSON keys must be strings"
                    )
                _check_text(key, f"{path} key {key[:40]!r}")
                stack.append((item, f"{path}.{key[:40]}", depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ValidationError(f"{path} is {value}, which JSON cannot represent; use null or a string")
            _check_float(value, path)
        elif value is None or isinstance(value, bool | int):
            pass
        else:
            raise ValidationError(
                f"{path} is a {type(value).__name__}, which is not JSON; convert it "
                "(for example a datetime to an ISO string, a Decimal to a string), or annotate the "
                "handler's argument with its type, and Tenure converts it both ways"
            )


def check_spec(spec: JobSpec, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> JobSpec:
    """Checks every value a spec sets; None options are the task policy's to fill in (the client)."""
    check_spec_json(spec, max_payload_bytes=max_payload_bytes)
    return spec


def check_spec_json(spec: JobSpec, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """`check_spec`, returning the payload's compact JSON text."""
    check_task_name(spec.task)
    if spec.queue is not None:
        check_queue(spec.queue)
    payload_text = payload_json(spec.payload, max_bytes=max_payload_bytes)
    if not isinstance(spec.result_wanted, bool):
        raise ValidationError(f"result_wanted must be True or False, got {spec.result_wanted!r}")
    if spec.priority is not None and (
        isinstance(spec.priority, bool)
        or not isinstance(spec.priority, int)
        or not (PRIORITY_RANGE[0] <= spec.priority <= PRIORITY_RANGE[1])
    ):
        raise ValidationError(
            f"priority {spec.priority!r} is out of range: give an integer from "
            f"{PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]} (higher runs first)"
        )
    if spec.max_attempts is not None and (
        isinstance(spec.max_attempts, bool)
        or not isinstance(spec.max_attempts, int)
        or not (1 <= spec.max_attempts <= MAX_ATTEMPTS_LIMIT)
    ):
        raise ValidationError(
            f"max_attempts {spec.max_attempts!r} is invalid: give an integer from 1 to {MAX_ATTEMPTS_LIMIT}"
        )
    if spec.delay is not None:
        if (
            isinstance(spec.delay, bool)
            or not isinstance(spec.delay, int | float)
            or not (math.isfinite(spec.delay) and 0 <= spec.delay <= MAX_DELAY_SECONDS)
        ):
            raise ValidationError(
                f"delay {spec.delay!r} is invalid: give a number of seconds >= 0 "
                f"and at most {MAX_DELAY_SECONDS} (about 100 years)"
            )
        if spec.run_at is not None:
            raise ValidationError("give either run_at or delay, not both")
    if spec.run_at is not None and (not isinstance(spec.run_at, datetime) or spec.run_at.tzinfo is None):
        raise ValidationError(
            f"run_at {spec.run_at!r} must be a timezone-aware datetime (for example datetime.now(UTC))"
        )
    if spec.run_at is not None and not (RUN_AT_RANGE[0] <= spec.run_at < RUN_AT_RANGE[1]):
        raise ValidationError(
            f"run_at {spec.run_at.isoformat()} is out of range: give a time from "
            f"{RUN_AT_RANGE[0].year} up to {RUN_AT_RANGE[1].year} (the database refuses others)"
        )
    if spec.ordering_key is not None and (
        not isinstance(spec.ordering_key, str) or not 1 <= len(spec.ordering_key) <= 200
    ):
        raise ValidationError(
            f"ordering_key {spec.ordering_key!r} is invalid: give a string of 1 to 200 characters "
            "(an account or order id), or None for no ordering"
        )
    if spec.ordering_key is not None:
        _check_text(spec.ordering_key, "ordering_key")
    return payload_text

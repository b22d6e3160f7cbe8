"""What a handler may hand back besides success or an exception: a snooze, and a result."""

from __future__ import annotations

import json
import math
import numbers
from datetime import timedelta
from typing import Any

from tenure.model.errors import ConfigurationError, Permanent

#: The largest result a worker stores by default (WorkerOptions.max_result_bytes).
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
#: How many times a job may snooze by default before it goes dead (TaskPolicy.max_snoozes).
DEFAULT_MAX_SNOOZES = 100


class Snooze(Exception):
    """Return or raise this from a handler to run the job again after `delay`, without spending
    an attempt: "not yet", not "failed". Each snooze is in the job's history; a job that
    snoozes more than its task's `max_snoozes` goes dead with SNOOZE_LIMIT."""

    delay: float
    reason: str | None

    def __init__(self, delay: float | timedelta, reason: str | None = None) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, numbers.Real)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ConfigurationError(
                f"Snooze delay must be a number of seconds >= 0 or a timedelta, got {delay!r}"
            )
        super().__init__(f"snooze for {float(seconds):g}s" + (f": {reason}" if reason else ""))
        self.delay = float(seconds)
        self.reason = reason


class ResultRefused(Permanent):
    """A handler returned a value that cannot be stored as its job's result. Permanent: the
    same code would return the same value again; the job is dead with the reason, and can be
    reprocessed once the handler is fixed."""


def encode_result(value: Any, max_bytes: int) -> Any:
    """The handler's return value as the JSON Tenure stores, or ResultRefused naming why."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ResultRefused(
            f"the handler returned {type(value).__name__}, which is not JSON ({exc}); return a "
            "JSON value (dict, list, str, number, bool or None), or store large or binary output "
            "elsewhere and return a reference to it",
            code="RESULT_NOT_JSON",
        ) from None
    if "\\u0000" in text:
        raise ResultRefused(
            "the handler's result contains a NUL character, which PostgreSQL's jsonb cannot "
            "store; strip it or encode the value (base64)",
            code="RESULT_NOT_JSON",
        )
    size = len(text.encode())
    if size > max_bytes:
        raise ResultRefused(
            f"the handler's result is {size} bytes of JSON, over the limit of {max_bytes} "
            "(WorkerOptions.max_result_bytes, --max-result-bytes): store it elsewhere and return "
            "a reference, or raise the limit",
            code="RESULT_TOO_LARGE",
        )
    return json.loads(text)

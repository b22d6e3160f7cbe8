"""Durations for people: read from the command line (`90`, `90s`, `15m`, `12h`, `30d`, `2w`) and
shown in output (`3.2m`, `3.2m ago`, `in 2.0h`)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_FORMAT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def duration(text: str) -> float:
    """An argparse type: seconds from a number with an optional unit s, m, h, d or w."""
    match = _FORMAT.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write it like 90s, 15m, 12h or 30d")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return seconds


def queue_duration(text: str) -> tuple[str, float]:
    """An argparse type for QUEUE=DURATION."""
    queue, sep, rest = text.partition("=")
    if not sep or not queue:
        raise argparse.ArgumentTypeError(f"{text!r} is not QUEUE=DURATION; write it like emails=3d")
    return queue, duration(rest)


def human(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def relative(at: datetime | None, now: datetime) -> str:
    """'3.2m ago', 'in 2.0h', or '-': `at` against `now`, the database's clock."""
    if at is None:
        return "-"
    seconds = (at - now).total_seconds()
    return f"in {human(seconds)}" if seconds > 0 else f"{human(-seconds)} ago"

"""Arrays sent to PostgreSQL in its own text form, for statements that cast the parameter
(`%(ids)s::bigint[]`, `%(tasks)s::text[]`).

psycopg builds an array parameter from a Python list element by element, choosing a dumper for
each, and a cursor chooses afresh for every statement. On the hot statements that cost more than
the array is worth: about a microsecond of worker CPU a job in every completion batch, and 0.1 ms of
an idle worker's claim, whose four arrays are the same from one claim to the next (measured in
docs/performance.md). A string is the cheapest parameter psycopg sends."""

from __future__ import annotations

import math
from collections.abc import Iterable


def bigint_array(values: Iterable[int]) -> str:
    """Integers as a bigint[] literal."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array(values: Iterable[str]) -> str:
    """Strings as a text[] literal: each element quoted, its backslashes and quotes escaped, so
    that no value (empty, NULL, with commas, braces or spaces) is read as anything but itself."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def float8_array(values: Iterable[float]) -> str:
    """Finite numbers as a float8[] literal (repr round-trips a float exactly)."""
    parts = []
    for v in values:
        number = float(v)
        if not math.isfinite(number):
            raise ValueError(f"{v!r} is not a finite number")
        parts.append(repr(number))
    return "{" + ",".join(parts) + "}"

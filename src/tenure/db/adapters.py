"""How Tenure's connections read values back: jsonb decoded from its text once.

psycopg's own jsonb loader hands `json.loads` bytes, whose encoding json then detects: for the
small payloads every claim returns, that doubles the decoding's cost, once per job. The text is
scanned by json's own scanner directly: jsonb's output has no whitespace around the value, so
the two whitespace matches of `JSONDecoder.decode` only cost (0.36 us of the 0.55 an empty
object takes; 0.5 us of 1.7 for a typical payload)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection, Connection
from psycopg.abc import Buffer
from psycopg.adapt import Loader

_decoder = json.JSONDecoder()
_decode_json = _decoder.decode
# The scanner decode itself runs (the C one where built): typeshed leaves the attribute out.
_scan_json: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]


def decode_jsonb(text: str) -> Any:
    """The value of jsonb's text form, as json.loads reads it."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return _decode_json(text)  # not JSON at its start: decode says where, and raises
    # Anything after the value (whitespace, or text json refuses): decode has the last word.
    return value if end == len(text) else _decode_json(text)


class JsonbLoader(Loader):
    def load(self, data: Buffer) -> Any:
        return decode_jsonb(str(data, "utf-8"))


def use_tenure_adapters(conn: AsyncConnection[Any] | Connection[Any]) -> None:
    conn.adapters.register_loader("jsonb", JsonbLoader)

"""Tenure's jsonb loader reads exactly what json.loads reads, and refuses what it refuses."""

from __future__ import annotations

import json

import pytest

from tenure.db.adapters import decode_jsonb

DOCUMENTS = [
    "{}",
    "[]",
    '{"a": 1, "b": [1, 2.5, null, true, false], "c": {"d": "\\u00e9\\n"}}',
    '"text"',
    "12345678901234567890123456789012345678901234567890",
    "-0.0",
    "1e400",
    '{"$secret": "stripe/api-key"}',
    '{"a": 1} ',
    ' {"a": 1}',
]
REFUSED = ["", "{", '{"a": 1} x', "nul", '{"a": 1}{"b": 2}', "[1,]"]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_a_document_decodes_to_what_json_loads_gives(text: str) -> None:
    """Values of every JSON type, a number past 64 bits, escapes, and whitespace around the value
    (jsonb never writes it, but a value with it still reads right)."""
    assert decode_jsonb(text) == json.loads(text)


@pytest.mark.parametrize("text", REFUSED)
def test_text_json_refuses_is_refused_with_json_s_error(text: str) -> None:
    """Nothing, a cut-off value, text after the value, two values: json's own error."""
    with pytest.raises(json.JSONDecodeError):
        decode_jsonb(text)

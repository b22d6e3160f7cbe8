"""Job validation messages name the problem and the fix (no database)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenure import JobSpec, ValidationError
from tenure.model.secrets import credential_paths, has_plain_credentials, has_secret_refs, is_secret_ref
from tenure.model.validation import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_DEPTH,
    _check_values,
    _plainly_storable,
    check_payload,
    check_queue,
    check_schema_name,
    check_spec,
    check_task_name,
    payload_json,
)


def nested(depth: int) -> dict[str, Any]:
    payload: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        payload = {"n": payload}
    return payload


@pytest.mark.parametrize(
    ("payload", "problem", "fix"),
    [
        ([1, 2], "must be a JSON object", "dict of keyword arguments"),
        ("text", "must be a JSON object", "dict"),
        (None, "must be a JSON object", "dict"),
        ({"a": "x\x00y"}, "NUL character", "remove it or encode"),
        ({"a\x00b": 1}, "NUL character", "remove it or encode"),
        ({"a": ["ok", {"deep": "\x00"}]}, "payload.a[1].deep contains a NUL", "remove it"),
        ({"a": "\ud800"}, "not valid UTF-8", "base64"),
        ({"\udcff": 1}, "not valid UTF-8", "base64"),
        ({1: "x"}, "JSON keys must be strings", "key"),
        ({"t": datetime(2024, 1, 1, tzinfo=UTC)}, "is a datetime, which is not JSON", "ISO string"),
        ({"d": Decimal("1.5")}, "is a Decimal", "to a string"),
        ({"b": b"raw"}, "is a bytes", "convert it"),
        ({"f": math.nan}, "JSON cannot represent", "use null or a string"),
        ({"f": math.inf}, "JSON cannot represent", "use null or a string"),
        (nested(MAX_PAYLOAD_DEPTH + 5), f"nested deeper than {MAX_PAYLOAD_DEPTH}", "flatten"),
        ({"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)}, "over the limit of 1048576", "enqueue a reference"),
    ],
)
def test_bad_payloads_are_rejected_with_problem_and_fix(payload: Any, problem: str, fix: str) -> None:
    """Each kind of payload PostgreSQL's jsonb cannot store exactly is refused, naming problem and fix."""
    with pytest.raises(ValidationError) as info:
        check_payload(payload)
    assert problem in str(info.value) and fix in str(info.value)


def test_self_referencing_payload_is_rejected_not_looped_on() -> None:
    """A payload that contains itself is refused as too deep instead of hanging the producer."""
    payload: dict[str, Any] = {}
    payload["me"] = payload
    with pytest.raises(ValidationError, match="nested deeper"):
        check_payload(payload)


def test_size_limit_is_configurable_and_counts_utf8_bytes() -> None:
    """The size limit is measured in UTF-8 bytes of the JSON text and can be raised or lowered."""
    payload = {"s": "é" * 60}  # 120 bytes of text, 60 characters
    check_payload(payload, max_bytes=200)
    with pytest.raises(ValidationError, match="over the limit of 100"):
        check_payload(payload, max_bytes=100)
    big = {"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES + 10)}
    assert check_payload(big, max_bytes=2 * DEFAULT_MAX_PAYLOAD_BYTES) is big


def test_acceptable_payload_passes_unchanged() -> None:
    """A well-formed payload is accepted and returned as the same object."""
    payload = {"a": 1, "b": [1.5, None, True, "é ☃ 😀"], "c": {"d": -(2**70)}, "": ""}
    assert check_payload(payload) is payload
    assert check_payload(nested(MAX_PAYLOAD_DEPTH - 1))


@pytest.mark.parametrize(
    "queue", ["", "-starts-with-dash", "has space", "x" * 64, "naïve", "a/b", "a\nb", None, 7]
)
def test_invalid_queue_names_are_rejected(queue: Any) -> None:
    """Queue names outside the allowed alphabet or length are refused, with an example of a valid one."""
    with pytest.raises(ValidationError) as info:
        check_queue(queue)
    assert "invalid queue name" in str(info.value) and "for example" in str(info.value)


@pytest.mark.parametrize("queue", ["default", "billing.v2", "a", "A-b_c:d.e", "x" * 63])
def test_valid_queue_names_pass(queue: str) -> None:
    """Names of 1-63 letters, digits and '_.:-' starting with a letter or digit are accepted."""
    assert check_queue(queue) == queue


@pytest.mark.parametrize("task", ["", "x" * 201, None, "tab\there", "nul\x00", "lone\ud800"])
def test_invalid_task_names_are_rejected(task: Any) -> None:
    """Empty, over-long, non-string or control-character task names are refused."""
    with pytest.raises(ValidationError, match="task name"):
        check_task_name(task)


@pytest.mark.parametrize("schema", ["", "Upper", "1abc", "has-dash", "x" * 42, None])
def test_invalid_schema_names_are_rejected(schema: Any) -> None:
    """Schema names must be lower-case identifiers, and the message says so."""
    with pytest.raises(ValidationError, match="lower-case letters"):
        check_schema_name(schema)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_attempts": 0}, "max_attempts 0 is invalid: give an integer from 1 to"),
        ({"max_attempts": -3}, "max_attempts -3 is invalid"),
        ({"max_attempts": 2.5}, "max_attempts 2.5 is invalid"),
        ({"max_attempts": True}, "max_attempts True is invalid"),
        ({"max_attempts": 10_001}, "max_attempts 10001 is invalid"),
        ({"priority": 40_000}, "priority 40000 is out of range: give an integer from -32768 to 32767"),
        ({"priority": -40_000}, "priority -40000 is out of range"),
        ({"priority": 1.5}, "priority 1.5 is out of range"),
        ({"priority": "high"}, "priority 'high' is out of range"),
        ({"priority": True}, "priority True is out of range"),
        ({"delay": -1}, "delay -1 is invalid: give a number of seconds >= 0"),
        ({"delay": math.nan}, "delay nan is invalid"),
        ({"delay": math.inf}, "delay inf is invalid"),
        ({"delay": "5"}, "delay '5' is invalid"),
        ({"delay": 1e15}, "at most 3162240000 (about 100 years)"),
        ({"delay": 5, "run_at": datetime.now(UTC)}, "give either run_at or delay, not both"),
        ({"run_at": datetime(2030, 1, 1)}, "must be a timezone-aware datetime"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "must be a timezone-aware datetime"),
        ({"run_at": datetime(9999, 12, 31, tzinfo=UTC)}, "run_at 9999-12-31T00:00:00+00:00 is out of range"),
        ({"run_at": datetime(1, 1, 1, tzinfo=UTC)}, "is out of range: give a time from 1900 up to 9000"),
        ({"queue": "bad queue"}, "invalid queue name"),
        ({"task": ""}, "invalid task name"),
        ({"payload": [1]}, "payload must be a JSON object"),
    ],
)
def test_bad_job_options_are_rejected(changes: dict[str, Any], message: str) -> None:
    """Each invalid option of a job is refused with a message that names the value and the valid range."""
    spec = JobSpec(task="t", payload={"a": 1})
    for key, value in changes.items():
        setattr(spec, key, value)
    with pytest.raises(ValidationError) as info:
        check_spec(spec)
    assert message in str(info.value)


def test_valid_spec_passes() -> None:
    """Boundary values of every option are accepted."""
    for spec in (
        JobSpec(task="t", priority=-32768, max_attempts=1, delay=0),
        JobSpec(task="t", priority=32767, max_attempts=1000, delay=86400.5),
        JobSpec(task="t", run_at=datetime(2030, 1, 1, tzinfo=UTC)),
    ):
        assert check_spec(spec) is spec


@pytest.mark.parametrize("value", [1e300, 2.0**60, -1.5e300, 1.7976931348623157e308])
def test_large_floats_jsonb_would_change_are_rejected(value: float) -> None:
    """A float that jsonb would return as a different integer is refused, suggesting an int or string."""
    with pytest.raises(ValidationError) as info:
        check_payload({"f": [value]})
    assert "payload.f[0] is the float" in str(info.value) and "int or a string" in str(info.value)


@pytest.mark.parametrize("value", [1e16, 1.5e20, 0.1, 1e-300, 5e-324, 9007199254740993.0, -0.0])
def test_floats_jsonb_returns_equal_are_accepted(value: float) -> None:
    """Floats that come back from jsonb as an equal number pass validation."""
    assert check_payload({"f": value}) == {"f": value}


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),  # with NULs and lone surrogates among them
    st.datetimes(),
    st.decimals(allow_nan=False),
)
_KEYS = st.one_of(st.text(max_size=8), st.integers(-3, 3))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_the_quick_payload_walk_refuses_exactly_what_the_named_walk_refuses(payload: dict[Any, Any]) -> None:
    """The enqueue's walk that names no paths lets a payload through only if the walk that names
    the offending value finds none, so every refusal still names its value and its fix."""
    try:
        _check_values(payload)
        named_refusal = None
    except ValidationError as exc:
        named_refusal = str(exc)
    if _plainly_storable(payload):
        assert named_refusal is None or "UTF-8" in named_refusal  # UTF-8: checked on the whole text
    try:
        payload_json(payload, max_bytes=10**9)
        refused = None
    except ValidationError as exc:
        refused = str(exc)
    assert refused == named_refusal


_CREDENTIAL_KEYS = st.sampled_from(["password", "api-key", "Token", "user", "secret", "note", "$secret"])
_CREDENTIAL_VALUES = st.recursive(
    st.one_of(st.none(), st.text(max_size=3), st.integers()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_CREDENTIAL_KEYS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_CREDENTIAL_KEYS, _CREDENTIAL_VALUES, max_size=4))
def test_the_quick_credential_check_finds_what_the_path_listing_finds(payload: dict[str, Any]) -> None:
    """Every enqueue asks whether a payload holds a plain credential without listing paths; the
    answer is the listing's, so a warning or refusal is never skipped nor invented."""
    assert has_plain_credentials(payload) == bool(credential_paths(payload))


def _any_secret_ref(value: Any) -> bool:
    if is_secret_ref(value):
        return True
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return any(_any_secret_ref(child) for child in children)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_CREDENTIAL_KEYS, _CREDENTIAL_VALUES, max_size=4))
def test_the_worker_s_secret_reference_check_finds_every_reference_and_nothing_else(
    payload: dict[str, Any],
) -> None:
    """The worker asks of every job whether its payload holds a secret reference (a one-key dict
    naming a secret, at any depth); the answer is the plain recursive one's, look-alikes aside."""
    assert has_secret_refs(payload) == _any_secret_ref(payload)
    assert has_secret_refs({"a": [1, {"b": {"$secret": "db-password"}}]})
    assert not has_secret_refs({"a": {"$secret": 1}, "b": {"$secret": "x", "extra": 1}})

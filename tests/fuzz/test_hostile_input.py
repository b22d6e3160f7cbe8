"""Hostile and malformed input at the public entry points: every input is either accepted and read
back exactly, or rejected with a clear error and the database left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tenure.db.connect import describe_dsn, resolve_dsn
from tenure.model.errors import TenureError, ValidationError
from tenure.model.validation import MAX_PAYLOAD_DEPTH
from tenure.ops.cli import main
from tenure.producer.sync_client import SyncClient

SCHEMA = "tenure"
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
SQL_META = ["'", '"', ";", "--", "/*", "*/", "\\", "%s", "%(x)s", "$1", "{}", "DROP TABLE jobs;", "\x00"]

#: What a command line can carry in-process (lone surrogates only arrive from invalid UTF-8 argv
#: bytes, tested through a real process below).
argv_text = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40),
    st.lists(st.sampled_from([*SQL_META, "a", "Z", "0", "_", ".", " ", "é"]), max_size=12).map("".join),
)
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.lists(
        st.sampled_from([*SQL_META, "a", "Z", "0", "_", ".", ":", "-", " ", "é", "\n"]), max_size=12
    ).map("".join),
)
#: Hostile text that cannot move the password out of its place in a URL.
url_part = hostile_text.map(lambda t: "".join(c for c in t if c not in "/@:?#"))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=20,
)
payloads = st.dictionaries(hostile_text, json_values, max_size=5)


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"n": value}
    return value


def _jobs(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT id, queue, task, payload::text, priority, max_attempts FROM {SCHEMA}.jobs ORDER BY id"
        ).fetchall()


def _stored(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"SELECT queue, task, payload, priority, max_attempts FROM {SCHEMA}.jobs WHERE id = %s", [job_id]
        ).fetchone()
    assert row is not None, f"job {job_id} was acknowledged but is not stored"
    return dict(zip(("queue", "task", "payload", "priority", "max_attempts"), row, strict=True))


@pytest.fixture
def client(dsn: str) -> Iterator[SyncClient]:
    with SyncClient(dsn, schema=SCHEMA) as c:
        yield c


@FUZZ
@given(task=hostile_text, queue=hostile_text, payload=payloads, priority=st.integers(-(2**20), 2**20))
@example(task="t", queue="q", payload={"s": "a\x00b"}, priority=0)
@example(task="t", queue="q", payload={"s": "\udc80"}, priority=0)
@example(task="t'; DROP TABLE tenure.jobs; --", queue="q", payload={}, priority=0)
@example(task="t", queue="q;DELETE", payload={}, priority=0)
@example(task="t" * 201, queue="q", payload={}, priority=0)
@example(task="t", queue="q", payload={"big": "x" * 2_000_000}, priority=0)
@example(task="t", queue="q", payload=_nested(MAX_PAYLOAD_DEPTH + 5), priority=0)
@example(task="t", queue="q", payload=_nested(MAX_PAYLOAD_DEPTH - 2), priority=0)
@example(task="t", queue="q", payload={"f": 1e300, "i": 2**64, "neg0": -0.0}, priority=0)
@example(task="t", queue="q", payload={"n": float("nan")}, priority=0)
def test_enqueue_round_trips_or_rejects_cleanly(
    dsn: str, client: SyncClient, task: str, queue: str, payload: dict[str, Any], priority: int
) -> None:
    """Client.enqueue: the stored row equals the input exactly, or ValidationError and no row."""
    before = _jobs(dsn)
    try:
        job = client.enqueue(task, payload, queue=queue, priority=priority)
    except ValidationError as exc:
        assert str(exc), "a rejection must say why"
        assert _jobs(dsn) == before
        return
    stored = _stored(dsn, job.id)
    assert stored == {
        "queue": queue,
        "task": task,
        "payload": payload,
        "priority": priority,
        "max_attempts": 20,
    }
    assert json.dumps(stored["payload"], sort_keys=True) == json.dumps(payload, sort_keys=True)
    assert len(_jobs(dsn)) == len(before) + 1


@FUZZ
@given(
    task=argv_text,
    queue=argv_text,
    # "-" is the documented "read the payload from stdin", which a captured test cannot give.
    payload_text=st.one_of(argv_text.filter(lambda text: text != "-"), payloads.map(json.dumps)),
    extra=st.lists(
        st.sampled_from(["--priority", "--delay", "--max-attempts", "--count"]) | argv_text, max_size=4
    ),
)
@example(task="t", queue="q", payload_text='{"a": "\\u0000"}', extra=[])
@example(task="t", queue="q", payload_text="[1, 2]", extra=[])
@example(task="t", queue="q", payload_text="{", extra=[])
@example(task="t", queue="q", payload_text="{}", extra=["--priority", "99999"])
@example(task="t", queue="q", payload_text="{}", extra=["--max-attempts", "0"])
@example(task="t", queue="q", payload_text="{}", extra=["--delay", "nan"])
def test_cli_enqueue_round_trips_or_fails_with_nothing_written(
    dsn: str, capsys: pytest.CaptureFixture[str], task: str, queue: str, payload_text: str, extra: list[str]
) -> None:
    """`tenure enqueue` with hostile arguments: exit 0 and an exact row, or a non-zero exit, a message
    and no row; never a traceback."""
    before = _jobs(dsn)
    argv = [
        "enqueue",
        "--dsn",
        dsn,
        "--json",
        "--by-name",
        "--queue",
        queue,
        "--payload",
        payload_text,
        *extra,
        "--",
        task,
    ]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code if isinstance(exit_.code, int) else 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    after = _jobs(dsn)
    if code != 0:
        assert captured.err.strip(), "a rejection must say why"
        assert after == before
        return
    new = after[len(before) :]
    assert new and all(row[1] == queue and row[2] == task for row in new)
    assert all(json.loads(row[3]) == json.loads(payload_text) for row in new)


def test_cli_rejects_invalid_utf8_arguments_cleanly(dsn: str) -> None:
    """Invalid UTF-8 bytes in argv (a real process) give a clear error, exit non-zero, write nothing."""
    before = _jobs(dsn)
    for argv in (
        [b"enqueue", b"bad\xff\xfetask"],
        [b"enqueue", b"--by-name", b"--queue", b"q", b"bad\xff\xfetask"],
        [b"enqueue", b"--by-name", b"--queue", b"q\xff", b"task"],
    ):
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"tenure.ops.cli", *argv],
            env={**os.environ, "TENURE_DSN": dsn},
            capture_output=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert b"Traceback" not in done.stderr and done.stderr.strip()
    assert _jobs(dsn) == before


@settings(max_examples=300, deadline=None, database=None)
@given(
    dsn=st.one_of(
        hostile_text,
        st.builds(
            lambda u, p, h, d: f"postgresql://{u}:Pw9{p}@{h}/{d}",
            url_part,
            st.text(alphabet="abcXYZ019-_.~!$&'()*+,;=", max_size=12),  # a password
            url_part,
            url_part,
        ),
    )
)
@example(dsn="host=localhost password='Pw9secret")
@example(dsn="postgresql://u:Pw9p@h:notaport/db")
@example(dsn="postgresql://u:Pw9se%00cret@h/db")
@example(dsn="host=h password=Pw9first Pw9secondhalf")
@example(dsn="\ud800")
@example(dsn="postgresql://:Pw9@[\r/")  # libpq quotes it across a line break
def test_dsn_is_accepted_or_rejected_with_a_clear_error(dsn: str) -> None:
    """A DSN string is either parsed or refused with DatabaseUnavailable naming the DSN; neither the
    refusal nor the description used in logs ever shows (part of) the password."""
    try:
        resolve_dsn(dsn) if dsn else None
    except TenureError as exc:
        assert "DSN" in str(exc)
        assert "Pw9" not in str(exc)
        return
    assert "Pw9" not in describe_dsn(dsn)

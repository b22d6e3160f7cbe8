"""What the commands print for people: tables, panels and sentences, never a Python repr, and a
failure's own line rather than the first line of its traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _ops import cli, run_worker_until, sql

import tenure
from tenure.ops.cli import _common as cli_common
from tenure.ops.cli import build_parser
from tenure.ops.cli._common import log_level
from tenure.ops.cli._render import error_line

SEND = "tests.apps.shop_app.send"
#: What a Python repr looks like in a command's output.
REPR = re.compile(
    r"datetime\.datetime\(|<JobState|JobState\.|UUID\('|\{'[a-z_]+': |Decimal\(|zoneinfo|Traceback \(most"
)


def app_with_failures(dsn: str) -> tuple[tenure.Tenure, int, int]:
    app = tenure.Tenure(dsn)

    @app.task(name="mail.send", queue="mail", max_attempts=1)
    def send(ctx: tenure.JobContext, to: str) -> None:
        if to == "nobody":
            raise tenure.Permanent("no such mailbox", code="NO_MAILBOX")
        raise ValueError(f"cannot parse address {to!r}")

    permanent = app.enqueue_sync(send, {"to": "nobody"}).id
    crashed = app.enqueue_sync(send, {"to": "a@@b"}).id
    run_worker_until(
        app, lambda: sql(dsn, "SELECT count(*) FROM tenure.jobs WHERE state = 'dead'")[0][0] == 2
    )
    return app, permanent, crashed


def test_no_command_prints_a_python_repr(
    dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """show, dead list and show, status (wide and 80 columns), queues, limits, effects, ordering,
    schedules, workflows and prune print no repr of a datetime, an enum, a UUID or a dict, and no
    traceback header."""
    _, permanent, crashed = app_with_failures(dsn)
    outputs = []
    for argv in (
        ["show", str(crashed)],
        ["dead", "list"],
        ["dead", "show", str(permanent)],
        ["status"],
        ["queues", "list"],
        ["limits", "list"],
        ["effects", "list"],
        ["ordering", "blocked"],
        ["schedules", "list"],
        ["workflows", "list"],
        ["prune"],
    ):
        code, out, err = cli(capsys, *argv, "--dsn", dsn)
        assert code == 0, (argv, err)
        assert not REPR.search(out), (argv, out)
        outputs.append(out)
    monkeypatch.setattr(cli_common.out, "_width", 80)
    code, out, _ = cli(capsys, "status", "--dsn", dsn)
    assert code == 0 and not REPR.search(out)
    assert max(len(line) for line in out.splitlines()) <= 80 and "mail" in out
    shown = outputs[0]
    assert f"job {crashed}" in shown and "dead" in shown and '"to": "a@@b"' in shown


def test_dead_list_shows_each_failures_own_line(
    dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler's crash is listed by its exception line (ValueError: ...), a Permanent by its
    message, never as 'Traceback (most recent call last):'."""
    app_with_failures(dsn)
    monkeypatch.setattr(cli_common.out, "_width", 200)  # one line per job, to read it whole
    code, out, _ = cli(capsys, "dead", "list", "--dsn", dsn)
    assert code == 0
    flat = " ".join(out.split())
    assert "ValueError: cannot parse address" in flat and "no such mailbox" in flat
    assert "Traceback" not in out


def test_error_line_finds_the_exception_in_a_chained_traceback() -> None:
    """The exception's own line is the last unindented one, past code lines and chaining notes."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in f\n'
        "    raise KeyError('k')\n"
        "KeyError: 'k'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 5, in f\n'
        "    raise Permanent('no such mailbox')\n"
        "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "tenure.model.errors.Permanent: no such mailbox\n"
    )
    assert error_line(text) == "tenure.model.errors.Permanent: no such mailbox"
    assert error_line("card declined\nmore detail") == "card declined"
    assert error_line(None) == ""


def test_enqueue_says_what_it_did_and_reads_a_payload_from_a_file_or_stdin(
    dsn: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tenure enqueue` prints a sentence naming the job, task and queue (no dict); `--payload @FILE`
    and `--payload -` read the payload (here 200 KiB, more than a command line holds); a missing
    file is exit 2 naming it."""
    big = {"to": "x" * 200_000}
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(big))
    code, out, err = cli(capsys, "enqueue", SEND, "--dsn", dsn, "--payload", f"@{path}")
    assert code == 0, err
    assert re.search(rf"enqueued job \d+: task {SEND} to queue emails", out) and not REPR.search(out)
    with path.open() as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        code, out, err = cli(capsys, "enqueue", SEND, "--dsn", dsn, "--payload", "-")
    assert code == 0, err
    assert sql(dsn, "SELECT count(*) FROM tenure.jobs WHERE length(payload->>'to') = 200000")[0][0] == 2
    code, _, err = cli(capsys, "enqueue", SEND, "--dsn", dsn, "--payload", "@/no/such.json")
    assert code == 2 and "cannot read /no/such.json" in err


def test_logging_flags_work_before_and_after_the_command() -> None:
    """-v, -q and --log-level are accepted after the command as well as before it."""
    parser = build_parser()
    assert log_level(parser.parse_args(["worker", "app:app", "-v"])) == 20
    assert log_level(parser.parse_args(["-v", "worker", "app:app"])) == 20
    assert log_level(parser.parse_args(["status", "-q"])) == 40
    assert log_level(parser.parse_args(["status", "--log-level", "debug"])) == 10
    assert log_level(parser.parse_args(["status"])) == 30


def test_error_line_reads_a_traceback_whose_start_was_cut() -> None:
    """A stored traceback keeps its last 1,900 characters: the exception line is still found."""
    cut = 'ne 3, in f\n    x()\n  File "b.py", line 9, in x\n    raise ValueError("bad")\nValueError: bad\n'
    assert error_line(cut) == "ValueError: bad"

"""The `tenure` command: exit codes, JSON output, dead-job operations, and no password ever printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from tenure.db.migrate import known_versions
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec
from tenure.ops.cli import EXIT_NOT_MIGRATED, EXIT_UNAVAILABLE, EXIT_USAGE, main

SECRET = "hunter2secret"
CLAIM = {"queue": "default", "limit": 10, "default_lease_seconds": 30, "default_runtime_seconds": 60}


def with_password(dsn: str) -> str:
    """The same DSN with a password the trust-auth test servers ignore, to catch it leaking."""
    return conninfo.make_conninfo(dsn, password=SECRET)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs `tenure ARGS` in-process: (exit code, stdout, stderr with its line wrapping undone)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refusing an argument
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert SECRET not in captured.out and SECRET not in captured.err
    return code, captured.out, " ".join(captured.err.split())


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    done = subprocess.run(
        [sys.executable, "-m", "tenure.ops.cli", *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert SECRET not in done.stdout and SECRET not in done.stderr
    return done


def sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def job_count(dsn: str) -> int:
    return int(sql(dsn, "SELECT count(*) FROM tenure.jobs")[0][0])


def test_migrate_twice_is_idempotent(empty_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tenure migrate` applies the schema once; the second run reports it up to date and applies nothing."""
    dsn = with_password(empty_dsn)
    code, out, _ = cli(capsys, "migrate", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out)["applied"] == known_versions()
    code, out, _ = cli(capsys, "migrate", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out)["applied"] == []
    code, out, _ = cli(capsys, "migrate", "--dsn", dsn)
    assert code == 0 and "up to date" in out


def test_two_concurrent_migrate_processes_both_succeed(empty_dsn: str) -> None:
    """Two `tenure migrate` processes started together on an empty database both exit 0; one applies."""
    dsn = with_password(empty_dsn)
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tenure.ops.cli", "migrate", "--dsn", dsn, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    all_versions = known_versions()
    assert sorted(json.loads(out)["applied"] for out, _ in results) == [[], all_versions]
    assert sql(empty_dsn, "SELECT count(*) FROM tenure.schema_migrations") == [(len(all_versions),)]


SEND = "tests.apps.shop_app.send"


def test_enqueue_writes_a_job_and_bad_input_writes_nothing(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tenure enqueue` stores a valid job; bad input exits 2 with a clear stderr and writes nothing."""
    secret_dsn = with_password(dsn)
    code, out, _ = cli(capsys, "enqueue", SEND, "--dsn", secret_dsn, "--payload", '{"to": "a@b.c"}', "--json")
    assert code == 0
    job_id = json.loads(out)["id"]
    assert sql(dsn, "SELECT task, payload FROM tenure.jobs WHERE id = %s", (job_id,)) == [
        (SEND, {"to": "a@b.c"})
    ]
    bad = [
        (["--payload", "{not json"], "--payload is not valid JSON"),
        (["--payload", "[1, 2]"], "payload must be a JSON object"),
        (["--payload", '{"to": "\\u0000"}'], "NUL character"),
        (["--queue", "bad queue"], "invalid queue name"),
        (["--max-attempts", "0"], "max_attempts 0 is invalid"),
        (["--priority", "70000"], "priority 70000 is out of range"),
        (["--delay", "-3"], "delay -3.0 is invalid"),
        (["--count", "0"], "--count"),
    ]
    for extra, message in bad:
        code, out, err = cli(capsys, "enqueue", SEND, "--dsn", secret_dsn, "--payload", '{"to": "x"}', *extra)
        assert code == EXIT_USAGE, (extra, out, err)
        assert message in err, (extra, err)
    assert job_count(dsn) == 1


def stored(dsn: str) -> list[tuple[Any, ...]]:
    return sql(dsn, "SELECT task, queue, priority, max_attempts FROM tenure.jobs ORDER BY id")


def test_enqueue_loads_the_tasks_app_and_applies_its_policy(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """TASK's app is found from its name (or --app); the job gets the task's queue, priority and
    attempts, and --queue, --priority and --max-attempts override them."""
    code, out, err = cli(capsys, "enqueue", SEND, "--dsn", dsn, "--payload", '{"to": "a@b.c"}', "--json")
    assert code == 0, err
    assert json.loads(out)["queue"] == "emails" and json.loads(out)["max_attempts"] == 3
    overrides = ["--queue", "urgent", "--priority", "2", "--max-attempts", "9"]
    assert cli(capsys, "enqueue", SEND, "--dsn", dsn, "--payload", '{"to": "a"}', *overrides)[0] == 0
    code, _, err = cli(
        capsys,
        "enqueue",
        "reports.build",
        "--app",
        "tests.apps.shop_app",
        "--dsn",
        dsn,
        "--payload",
        '{"report_id": 4}',
    )
    assert code == 0, err
    assert cli(capsys, "enqueue", SEND, "--dsn", dsn, "--payload", '{"to": "b"}', "--count", "2")[0] == 0
    assert stored(dsn) == [
        (SEND, "emails", 0, 3),
        (SEND, "urgent", 2, 9),
        ("reports.build", "reports", 5, 20),
        (SEND, "emails", 0, 3),
        (SEND, "emails", 0, 3),
    ]


def test_enqueue_refuses_what_no_worker_of_the_app_would_run(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown task, a payload that does not fit the handler, an app that cannot be found, and
    --by-name without a queue each exit 2 with the reason and the fix, and write nothing."""
    refused = [
        (
            [f"{SEND}x", "--payload", '{"to": "a"}'],
            [
                f"task '{SEND}x' is not registered in the app of 'tests.apps.shop_app'",
                f"did you mean '{SEND}'?",
            ],
        ),
        ([SEND, "--payload", '{"too": "a"}'], [f"payload does not fit task '{SEND}'", "(to, subject=...)"]),
        ([SEND], ["missing a required argument: 'to'"]),
        (
            ["reports.build", "--payload", '{"report_id": 1}'],
            ["cannot import 'reports'", "give an importable"],
        ),
        (["reports.build", "--app", "tests.apps.shop_app", "--payload", "{}"], ["payload does not fit"]),
        (["build", "--payload", "{}"], ["no module part", "--app MODULE[:APP]", "--by-name --queue QUEUE"]),
        (["shop.send", "--app", "not a module"], ["is not a module path"]),
        (["shop.send", "--by-name"], ["--by-name needs --queue"]),
        (["shop.send", "--by-name", "--queue", "q", "--app", "tests.apps.shop_app"], ["drop --app"]),
    ]
    for argv, messages in refused:
        code, out, err = cli(capsys, "enqueue", *argv, "--dsn", dsn)
        assert code == EXIT_USAGE, (argv, out, err)
        for message in messages:
            assert message in err, (argv, err)
    assert job_count(dsn) == 0


def test_enqueue_by_name_writes_to_the_named_queue_without_an_app(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--by-name --queue Q enqueues a task no local app registers, to Q with priority 0 and 20 attempts."""
    code, _, err = cli(
        capsys, "enqueue", "billing.charge", "--by-name", "--queue", "billing", "--dsn", dsn, "--json"
    )
    assert code == 0, err
    assert stored(dsn) == [("billing.charge", "billing", 0, 20)]


def test_enqueue_count_loads_copies_through_copy(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tenure enqueue --count N` writes N identical jobs."""
    by_name = ["--by-name", "--queue", "default"]
    code, out, _ = cli(
        capsys, "enqueue", "t", *by_name, "--dsn", dsn, "--payload", '{"n": 1}', "--count", "25", "--json"
    )
    assert code == 0 and json.loads(out)["enqueued"] == 25
    assert sql(dsn, "SELECT count(*), count(DISTINCT payload) FROM tenure.jobs") == [(25, 1)]


def make_dead(dsn: str, task: str = "reports.build") -> int:
    """A job that ran once and failed permanently, through the public queries."""

    async def go() -> int:
        q = Queries("tenure")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            [job] = await q.job_insert_many(conn, [JobSpec(task=task, max_attempts=3, queue="reports")])
            [claimed] = await q.job_claim(conn, owner="w1", **{**CLAIM, "queue": "reports"})
            await q.job_fail(
                conn,
                job_id=job.id,
                owner="w1",
                token=claimed.lease.token,
                error_code="BAD_VERSION",
                error="unsupported schema version 7",
                retry_delay=None,
            )
            return job.id

    import asyncio

    return asyncio.run(go())


def test_status_json_reports_counts_per_queue_and_state(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tenure status --json` gives per-queue counts by state and the oldest claimable job's age."""
    make_dead(dsn)
    for queue in ("a", "a", "b"):
        assert cli(capsys, "enqueue", "t", "--by-name", "--dsn", dsn, "--queue", queue)[0] == 0
    code, out, _ = cli(capsys, "status", "--dsn", with_password(dsn), "--json")
    assert code == 0
    report = {q["queue"]: q for q in json.loads(out)["queues"]}
    assert (report["a"]["pending"], report["a"]["running"], report["a"]["dead"]) == (2, 0, 0)
    assert (report["b"]["pending"], report["b"]["dead"]) == (1, 0)
    assert (report["reports"]["pending"], report["reports"]["dead"]) == (0, 1)
    assert report["a"]["oldest_claimable_age_s"] >= 0
    assert report["reports"]["oldest_claimable_age_s"] is None
    code, out, _ = cli(capsys, "status", "--dsn", dsn)
    assert code == 0 and "reports" in out


def test_dead_list_show_and_reprocess(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """dead list/show find the job; reprocess keeps its id and appends a 'reprocess' event."""
    secret_dsn = with_password(dsn)
    job_id = make_dead(dsn)
    code, out, _ = cli(capsys, "dead", "list", "--dsn", secret_dsn, "--json")
    assert code == 0
    [listed] = json.loads(out)
    assert listed["id"] == job_id and listed["last_error_code"] == "BAD_VERSION"
    code, out, _ = cli(capsys, "dead", "show", str(job_id), "--dsn", secret_dsn, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["job"]["state"] == "dead" and shown["job"]["id"] == job_id
    assert [e["event"] for e in shown["history"]] == ["dead"]
    code, out, err = cli(
        capsys,
        "dead",
        "reprocess",
        str(job_id),
        "--dsn",
        secret_dsn,
        "--reason",
        "schema v7 supported since 2.3",
        "--actor",
        "ops-alice",
        "--attempts",
        "2",
    )
    assert code == 0, err
    [(state, attempts, max_attempts, token)] = sql(
        dsn,
        "SELECT state::text, attempt_count, max_attempts, lease_token FROM tenure.jobs WHERE id = %s",
        (job_id,),
    )
    assert (state, attempts, max_attempts, token) == ("pending", 1, 3, 1)
    events = sql(
        dsn,
        "SELECT event, from_state::text, to_state::text, worker, error FROM tenure.job_events "
        "WHERE job_id = %s ORDER BY id",
        (job_id,),
    )
    assert events == [
        ("dead", "running", "dead", "w1", "unsupported schema version 7"),
        ("reprocess", "dead", "pending", "ops-alice", "schema v7 supported since 2.3"),
    ]
    assert sql(dsn, "SELECT count(*) FROM tenure.jobs") == [(1,)]  # same job, not a copy
    code, out, _ = cli(capsys, "dead", "list", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out) == []


def test_reprocess_is_refused_for_jobs_that_are_not_dead(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reprocessing a pending or missing job, or granting no attempts, exits non-zero and changes nothing."""
    dead_id = make_dead(dsn)
    code, out, _ = cli(capsys, "enqueue", "t", "--by-name", "--queue", "default", "--dsn", dsn, "--json")
    pending_id = json.loads(out)["id"]
    before = sql(dsn, "SELECT * FROM tenure.jobs ORDER BY id") + sql(dsn, "SELECT * FROM tenure.job_events")
    code, _, err = cli(capsys, "dead", "reprocess", str(pending_id), "--dsn", dsn, "--reason", "x")
    assert code == 1 and "is pending, not dead" in err
    code, _, err = cli(capsys, "dead", "reprocess", "999999", "--dsn", dsn, "--reason", "x")
    assert code == 1 and "missing" in err
    code, _, err = cli(capsys, "dead", "show", "999999", "--dsn", dsn)
    assert code == 1 and "no job with id 999999" in err
    for attempts in ("0", "-2"):
        code, _, err = cli(
            capsys, "dead", "reprocess", str(dead_id), "--dsn", dsn, "--reason", "x", "--attempts", attempts
        )
        assert code == EXIT_USAGE and "--attempts" in err, err
    after = sql(dsn, "SELECT * FROM tenure.jobs ORDER BY id") + sql(dsn, "SELECT * FROM tenure.job_events")
    assert after == before


def test_recover_moves_expired_leases_back(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tenure recover` returns jobs whose lease expired to the queue, scheduled for their backoff (or
    dead when out of attempts)."""

    async def expired_jobs() -> None:
        q = Queries("tenure")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            row = await (await conn.execute("SELECT now() - interval '1 hour'")).fetchone()
            assert row is not None
            past = row[0]
            await q.job_insert_many(conn, [JobSpec(task="t", max_attempts=1), JobSpec(task="t")], now=past)
            claimed = await q.job_claim(conn, owner="gone", now=past + timedelta(seconds=1), **CLAIM)
            assert len(claimed) == 2

    import asyncio

    asyncio.run(expired_jobs())
    code, out, _ = cli(capsys, "recover", "--dsn", with_password(dsn), "--json")
    assert code == 0
    # The one with attempts left waits out its backoff as scheduled.
    assert json.loads(out) == {"recovered": 2, "to_scheduled": 1, "to_pending": 0, "to_dead": 1}
    assert sql(dsn, "SELECT state::text, last_error_code FROM tenure.jobs ORDER BY id") == [
        ("dead", "LEASE_EXPIRED"),
        ("scheduled", "LEASE_EXPIRED"),
    ]
    code, out, _ = cli(capsys, "recover", "--dsn", dsn, "--json")
    assert json.loads(out)["recovered"] == 0


UNREACHABLE = f"postgresql://alice:{SECRET}@127.0.0.1:1/jobs"


@pytest.mark.parametrize(
    "command",
    [
        ["migrate"],
        ["status"],
        ["enqueue", "t", "--by-name", "--queue", "q"],
        ["dead", "list"],
        ["dead", "show", "1"],
        ["dead", "reprocess", "1", "--reason", "x"],
        ["recover"],
    ],
)
def test_unreachable_database_exits_3_without_the_password(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command against a closed port exits 3 and names host:port, never the password."""
    code, out, err = cli(capsys, *command, "--dsn", UNREACHABLE)
    assert code == EXIT_UNAVAILABLE, (out, err)
    assert "127.0.0.1:1" in err


def test_unreachable_database_exits_3_as_a_process() -> None:
    """`python -m tenure.ops.cli status` against a closed port exits 3 with the reason on stderr."""
    done = run_module("status", "--dsn", UNREACHABLE)
    assert done.returncode == EXIT_UNAVAILABLE
    assert "cannot connect to PostgreSQL at alice@127.0.0.1:1/jobs" in " ".join(done.stderr.split())


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["enqueue", "t", "--by-name", "--queue", "q"],
        ["enqueue", SEND, "--payload", '{"to": "a"}'],
        ["dead", "list"],
        ["dead", "show", "1"],
        ["recover"],
    ],
)
def test_unmigrated_schema_exits_4(
    empty_dsn: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command on a database without the schema exits 4 and says to run `tenure migrate`."""
    code, out, err = cli(capsys, *command, "--dsn", with_password(empty_dsn))
    assert code == EXIT_NOT_MIGRATED, (out, err)
    assert "tenure migrate" in err
    assert sql(empty_dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'tenure'") == [(0,)]


def test_unmigrated_schema_exits_4_as_a_process(empty_dsn: str) -> None:
    """`python -m tenure.ops.cli dead list` on an unmigrated database exits 4 with the fix on stderr."""
    done = run_module("dead", "list", "--dsn", with_password(empty_dsn), "--schema", "billing")
    assert done.returncode == EXIT_NOT_MIGRATED, done.stderr
    assert "tenure migrate --schema billing" in " ".join(done.stderr.split())

"""`tenure check` trips with a one-line reason on old work, dead jobs and silent workers;
`tenure status` reports each queue, throughput, workers and leases near expiry."""

from __future__ import annotations

import json

import pytest
from _ops import cli, sql


def enqueue(capsys: pytest.CaptureFixture[str], dsn: str, queue: str) -> int:
    code, out, err = cli(capsys, "enqueue", "ops.t", "--by-name", "--dsn", dsn, "--queue", queue, "--json")
    assert code == 0, err
    return int(json.loads(out)["id"])


def test_check_trips_on_an_artificially_aged_job(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A fresh job passes; the same job made 10 minutes old trips --max-claimable-age 5m with one line."""
    job_id = enqueue(capsys, dsn, "emails")
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "5m")
    assert (code, out.strip()) == (0, "OK")
    sql(
        dsn,
        "UPDATE tenure.jobs SET available_at = now() - interval '10 minutes' WHERE id = %s",
        (job_id,),
    )
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "5m")
    assert code == 1
    assert out.count("\n") == 1 and out.startswith(
        "CRITICAL: queue emails: oldest claimable job has waited 10"
    )
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "5m", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and len(report["problems"]) == 1
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "15m")
    assert (code, out.strip()) == (0, "OK")
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "5m", "--queue", "other")
    assert (code, out.strip()) == (0, "OK")


def test_check_trips_on_dead_jobs_their_age_and_silent_workers(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-dead, --max-dead-age and --max-stale-workers each trip on what they measure, and only then."""
    job_id = enqueue(capsys, dsn, "reports")
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'dead', attempt_count = 1, lease_token = 1, attempted_at = now(),"
        " finished_at = now() - interval '2 hours', last_error_code = 'BAD' WHERE id = %s",
        (job_id,),
    )
    assert cli(capsys, "check", "--dsn", dsn, "--max-dead", "1")[0] == 0
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-dead", "0")
    assert code == 1 and "1 dead jobs (limit 0)" in out
    assert cli(capsys, "check", "--dsn", dsn, "--max-dead-age", "3h")[0] == 0
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-dead-age", "1h")
    assert code == 1 and "queue reports: a dead job has been unresolved for 2.0h" in out
    sql(
        dsn,
        "INSERT INTO tenure.workers (id, queues, concurrency, seen_at) VALUES"
        " ('host:1:live', '{a}', 4, now()), ('host:2:gone', '{a}', 4, now() - interval '10 minutes')",
    )
    assert cli(capsys, "check", "--dsn", dsn, "--max-stale-workers", "1")[0] == 0
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-stale-workers", "0", "--stale-after", "1m")
    assert code == 1 and "1 workers silent for over 1.0m" in out
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-stale-workers", "0", "--stale-after", "20m")
    assert code == 0


def test_status_reports_throughput_workers_and_leases_near_expiry(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """status --json counts finished jobs per minute, jobs scheduled for later, workers, lease owners
    and near-expiry leases."""
    finished = [enqueue(capsys, dsn, "emails") for _ in range(3)]
    code, _, err = cli(
        capsys, "enqueue", "ops.t", "--by-name", "--dsn", dsn, "--queue", "emails", "--delay", "3600"
    )
    assert code == 0, err
    running = enqueue(capsys, dsn, "emails")
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'succeeded', attempt_count = 1, lease_token = 1,"
        " attempted_at = now(), finished_at = now() - (id %% 2) * interval '61 seconds' WHERE id = ANY(%s)",
        (finished,),
    )
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'running', attempt_count = 1, lease_token = 1, attempted_at = now(),"
        " lease_owner = 'host:1:live', lease_expires_at = now() + interval '5 seconds',"
        " lease_deadline = now() + interval '1 hour' WHERE id = %s",
        (running,),
    )
    sql(
        dsn,
        "INSERT INTO tenure.workers (id, queues, concurrency, busy) VALUES ('host:1:live', '{emails}', 4, 1)",
    )
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--json", "--near-expiry", "10s")
    assert code == 0
    report = json.loads(out)
    [emails] = report["queues"]
    per_minute = emails["finished_per_minute"]["succeeded"]
    assert sum(per_minute) == 3 and per_minute[0] >= 1 and per_minute[1] >= 1
    assert (emails["running"], emails["leases_near_expiry"]) == (1, 1)
    assert (emails["scheduled"], emails["pending"]) == (1, 0)
    workers = report["workers"]
    assert (workers["registered"], workers["lease_owners"], workers["busy_slots"]) == (1, 1, 1)
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--json", "--near-expiry", "2s")
    assert json.loads(out)["queues"][0]["leases_near_expiry"] == 0
    code, out, _ = cli(capsys, "status", "--dsn", dsn)
    assert code == 0 and "emails" in out and "1 registered" in " ".join(out.split())


def test_a_worker_with_a_failing_service_shows_in_status_and_trips_check(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A registry row reporting a failing completer is named in `tenure status` (service, time,
    error) and in its JSON, and makes `tenure check` exit 1 with a one-line reason."""
    failing = {"completer": {"failing_seconds": 42.0, "failures": 7, "error": "InsufficientPrivilege: no"}}
    sql(
        dsn,
        "INSERT INTO tenure.workers (id, queues, concurrency, failing) VALUES ('w-sick', '{q}', 4, %s)",
        (json.dumps(failing),),
    )
    code, out, _ = cli(capsys, "status", "--dsn", dsn)
    assert code == 0
    flat = " ".join(out.split())
    assert "worker w-sick: completer failing for" in flat and "InsufficientPrivilege: no" in flat
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--json")
    [row] = json.loads(out)["workers"]["list"]
    assert row["failing"] == failing and json.loads(out)["workers"]["failing"] == 1
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "1h")
    assert code == 1 and "1 workers report a failing service" in out


def test_a_paused_queue_waits_on_purpose_until_the_pause_is_too_old(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A paused queue's old job does not trip --max-claimable-age; the pause shows in status;
    --max-paused-age trips on a pause held too long, naming the fix."""
    job_id = enqueue(capsys, dsn, "reports")
    sql(
        dsn,
        "UPDATE tenure.jobs SET available_at = now() - interval '10 minutes' WHERE id = %s",
        (job_id,),
    )
    assert cli(capsys, "queues", "pause", "reports", "--reason", "month end", "--dsn", dsn)[0] == 0
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-claimable-age", "5m")
    assert (code, out.strip()) == (0, "OK")
    code, out, _ = cli(capsys, "status", "--dsn", dsn)
    assert code == 0 and "queue reports paused" in " ".join(out.split())
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--json")
    assert [q["paused"] for q in json.loads(out)["queues"]] == [True]
    sql(dsn, "UPDATE tenure.queue_pauses SET paused_at = now() - interval '5 hours'")
    code, out, _ = cli(capsys, "check", "--dsn", dsn, "--max-paused-age", "4h")
    assert code == 1 and out.startswith("CRITICAL: queue reports: paused for 5.0h (limit 4.0h)")
    assert "tenure queues resume reports" in out

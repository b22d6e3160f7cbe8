"""The dead-job workflow end to end: jobs die in a real worker, are found by filter, shown
with their history, refused when not dead, reprocessed with a recorded reason keeping their
identity, run again to success, and purged only past a retention age on explicit command."""

from __future__ import annotations

import json

import pytest
from _ops import cli, run_worker_until, sql, states

import tenure


def dead_ids(dsn: str) -> list[int]:
    return [r[0] for r in sql(dsn, "SELECT id FROM tenure.jobs WHERE state = 'dead' ORDER BY id")]


def history(dsn: str, job_id: int) -> list[tuple[str, str | None, str | None]]:
    return sql(
        dsn, "SELECT event, worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id", (job_id,)
    )


def test_dead_jobs_are_found_reprocessed_with_a_reason_and_run_again(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Filters find the right dead jobs; reprocess by filter keeps ids and tokens, logs who and why,
    and the jobs then succeed in a worker."""
    provider_fixed = {"value": False}
    app = tenure.Tenure(dsn)

    @app.task(name="mail.send", queue="mail")
    def send(ctx: tenure.JobContext, to: str) -> None:
        if not provider_fixed["value"]:
            raise tenure.Permanent("recipient rejected", code="SMTP_REJECTED")

    @app.task(name="reports.build", queue="reports")
    def build(ctx: tenure.JobContext) -> None:
        raise tenure.Permanent("unsupported schema version 7", code="BAD_VERSION")

    mail = [app.enqueue_sync(send, {"to": f"u{i}@example.com"}).id for i in range(3)]
    report = app.enqueue_sync(build, {}).id
    run_worker_until(app, lambda: len(dead_ids(dsn)) == 4)

    def listed(*filters: str) -> list[int]:
        code, out, err = cli(capsys, "dead", "list", "--dsn", dsn, "--json", *filters)
        assert code == 0, err
        return sorted(r["id"] for r in json.loads(out))

    assert listed() == sorted([*mail, report])
    assert listed("--queue", "mail") == mail
    assert listed("--task", "reports.build") == [report]
    assert listed("--error-code", "SMTP_REJECTED") == mail
    assert listed("--older-than", "1h") == []
    sql(
        dsn,
        "UPDATE tenure.jobs SET finished_at = finished_at - interval '2 hours' WHERE id = %s",
        (report,),
    )
    assert listed("--older-than", "1h") == [report]

    code, out, _ = cli(capsys, "dead", "show", str(mail[0]), "--dsn", dsn, "--json")
    shown = json.loads(out)
    assert (
        code == 0 and shown["job"]["state"] == "dead" and shown["job"]["last_error_code"] == "SMTP_REJECTED"
    )
    assert [e["event"] for e in shown["history"]] == ["dead"]

    tokens_before = dict(sql(dsn, "SELECT id, lease_token FROM tenure.jobs"))
    code, out, _ = cli(
        capsys,
        "dead",
        "reprocess",
        "--error-code",
        "SMTP_REJECTED",
        "--reason",
        "provider fixed the allow-list",
        "--actor",
        "ops-alice",
        "--attempts",
        "2",
        "--dsn",
        dsn,
        "--json",
    )
    assert code == 0 and sorted(json.loads(out)["reprocessed"]) == mail
    assert dict(sql(dsn, "SELECT id, lease_token FROM tenure.jobs")) == tokens_before  # identity kept
    for job_id in mail:
        assert history(dsn, job_id)[-1] == ("reprocess", "ops-alice", "provider fixed the allow-list")
    assert states(dsn) == {**{i: "pending" for i in mail}, report: "dead"}

    provider_fixed["value"] = True
    run_worker_until(app, lambda: all(states(dsn)[i] == "succeeded" for i in mail))
    assert sql(dsn, "SELECT count(*) FROM tenure.jobs") == [(4,)]  # the same jobs, not copies
    for job_id in mail:
        [(token,)] = sql(dsn, "SELECT lease_token FROM tenure.jobs WHERE id = %s", (job_id,))
        assert token == tokens_before[job_id] + 1  # the new attempt got the next token


def test_reprocess_refuses_jobs_that_are_not_dead_and_changes_nothing(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch naming a pending or missing job is refused as a whole, with a message naming each one;
    a missing reason or target is refused too."""
    code, out, _ = cli(capsys, "enqueue", "ops.t", "--by-name", "--queue", "ops", "--dsn", dsn, "--json")
    pending = json.loads(out)["id"]
    code, out, _ = cli(capsys, "enqueue", "ops.t", "--by-name", "--queue", "ops", "--dsn", dsn, "--json")
    dead = json.loads(out)["id"]
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'dead', attempt_count = 1, lease_token = 1, attempted_at = now(),"
        " finished_at = now() WHERE id = %s",
        (dead,),
    )
    snapshot = "SELECT * FROM tenure.jobs ORDER BY id"
    before = sql(dsn, snapshot) + sql(dsn, "SELECT * FROM tenure.job_events")

    code, _, err = cli(
        capsys, "dead", "reprocess", str(dead), str(pending), "999999", "--reason", "x", "--dsn", dsn
    )
    assert code == 1
    assert f"job {pending} is pending, not dead" in err and "job 999999 is missing" in err
    assert "nothing was reprocessed" in err
    code, _, err = cli(capsys, "dead", "reprocess", str(dead), "--reason", "  ", "--dsn", dsn)
    assert code == 2 and "--reason is empty" in err
    code, _, err = cli(capsys, "dead", "reprocess", "--reason", "x", "--dsn", dsn)
    assert code == 2 and "name the jobs" in err
    code, _, err = cli(capsys, "dead", "reprocess", str(dead), "--dsn", dsn)
    assert code == 2 and "--reason" in err
    assert sql(dsn, snapshot) + sql(dsn, "SELECT * FROM tenure.job_events") == before

    code, _, err = cli(capsys, "dead", "reprocess", str(dead), "--reason", "retry it", "--dsn", dsn)
    assert code == 0 and states(dsn)[dead] == "pending"


def test_purge_deletes_only_dead_jobs_past_the_age_and_only_with_yes(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --yes purge only counts; with it, dead jobs older than --older-than go with their
    history, younger dead jobs and every other state stay."""
    ids = []
    for _ in range(4):
        code, out, _ = cli(capsys, "enqueue", "ops.t", "--by-name", "--queue", "ops", "--dsn", dsn, "--json")
        ids.append(json.loads(out)["id"])
    old_dead, young_dead, old_succeeded, pending = ids
    for job_id, state, age in (
        (old_dead, "dead", "40 days"),
        (young_dead, "dead", "1 day"),
        (old_succeeded, "succeeded", "40 days"),
    ):
        sql(
            dsn,
            f"UPDATE tenure.jobs SET state = '{state}', attempt_count = 1, lease_token = 1,"
            f" attempted_at = now(), finished_at = now() - interval '{age}' WHERE id = %s",
            (job_id,),
        )
        sql(
            dsn,
            "INSERT INTO tenure.job_events (job_id, event, from_state, to_state, token)"
            " VALUES (%s, 'dead', 'running', 'dead', 1)",
            (job_id,),
        )
    code, _, err = cli(capsys, "dead", "purge", "--older-than", "30d", "--dsn", dsn)
    assert code == 2 and "1 dead job(s)" in err and "add --yes" in err
    assert len(states(dsn)) == 4
    code, out, _ = cli(capsys, "dead", "purge", "--older-than", "30d", "--yes", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out)["ids"] == [old_dead]
    assert states(dsn) == {young_dead: "dead", old_succeeded: "succeeded", pending: "pending"}
    assert sql(dsn, "SELECT count(*) FROM tenure.job_events WHERE job_id = %s", (old_dead,)) == [(0,)]
    code, _, err = cli(capsys, "dead", "purge", "--older-than", "soon", "--yes", "--dsn", dsn)
    assert code == 2 and "not a duration" in err

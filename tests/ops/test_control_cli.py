"""Job control on the command line: `tenure cancel`, `retry`, `queues list|pause|resume`
and `result`, against a real database, with real workers where claims matter."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from _ops import cli, run_worker_until, sql, states

import tenure
from tenure.db.queries import Queries
from tenure.model.actor import default_actor
from tenure.model.jobs import JobSpec

SNAPSHOT = "SELECT * FROM tenure.jobs ORDER BY id"
EVENTS = "SELECT * FROM tenure.job_events ORDER BY id"


def enqueue(dsn: str, queue: str, payloads: list[dict[str, Any]], **options: Any) -> list[int]:
    """Jobs of an unregistered task, by name, in one statement."""
    with tenure.SyncClient(dsn) as client:
        jobs = client.enqueue_many([JobSpec("t.any", p, queue=queue, **options) for p in payloads])
    return [j.id for j in jobs]


def claim(dsn: str, queue: str, limit: int) -> list[int]:
    """Claims due jobs of `queue` as a worker that then never writes again: they stay running."""

    async def go() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            claimed = await Queries("tenure").job_claim(
                conn,
                queue=queue,
                owner="holder-1",
                limit=limit,
                default_lease_seconds=300,
                default_runtime_seconds=600,
            )
        return [j.id for j in claimed]

    return asyncio.run(go())


def history(dsn: str, job_id: int) -> list[tuple[Any, ...]]:
    return sql(
        dsn,
        "SELECT event, worker, error_code, error FROM tenure.job_events WHERE job_id = %s ORDER BY id",
        (job_id,),
    )


def row(dsn: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        found = conn.execute("SELECT * FROM tenure.jobs WHERE id = %s", (job_id,)).fetchone()
    assert found is not None
    return found


def make_dead(dsn: str, job_id: int) -> None:
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'dead', attempt_count = 1, lease_token = 1, attempted_at = now(),"
        " finished_at = now(), last_error_code = 'BOOM', last_error = 'it broke' WHERE id = %s",
        (job_id,),
    )


def make_succeeded(dsn: str, job_id: int) -> None:
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'succeeded', attempt_count = 1, lease_token = 1,"
        " attempted_at = now(), finished_at = now() WHERE id = %s",
        (job_id,),
    )


@contextlib.contextmanager
def worker_in_background(app: tenure.Tenure) -> Iterator[None]:
    """A real worker of `app` runs in another thread for the duration of the block."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            run_worker_until(app, stop.is_set, timeout=60)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not failure, failure


def test_cancel_by_ids_takes_waiting_jobs_and_refuses_a_finished_one(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ids of a pending and a scheduled job are cancelled with who and why in their history; an id
    of a succeeded or missing job refuses the whole call (exit 1), changing nothing."""
    [now] = enqueue(dsn, "q", [{}])
    [later] = enqueue(dsn, "q", [{}], delay=3600)
    code, out, err = cli(
        capsys,
        "cancel",
        str(now),
        str(later),
        "--reason",
        "not needed",
        "--actor",
        "ops",
        "--dsn",
        dsn,
        "--json",
    )
    assert code == 0, err
    assert json.loads(out) == {"cancelled": [now, later], "revoked": [], "requeued": False}
    assert states(dsn) == {now: "cancelled", later: "cancelled"}
    assert history(dsn, now) == [("cancel", "ops", None, "not needed")]

    [waiting, done] = enqueue(dsn, "q", [{}, {}])
    make_succeeded(dsn, done)
    before = sql(dsn, SNAPSHOT) + sql(dsn, EVENTS)
    code, _, err = cli(capsys, "cancel", str(waiting), str(done), "--reason", "tidy", "--dsn", dsn)
    assert code == 1
    assert f"job {done} is succeeded, which is finished" in err and "nothing was cancelled" in err
    code, _, err = cli(capsys, "cancel", str(waiting), "999999", "--reason", "tidy", "--dsn", dsn)
    assert code == 1 and "there is no job 999999" in err
    code, _, err = cli(capsys, "cancel", str(waiting), "--reason", "  ", "--dsn", dsn)
    assert code == 2 and "a reason is required" in err
    assert sql(dsn, SNAPSHOT) + sql(dsn, EVENTS) == before

    code, out, _ = cli(capsys, "cancel", str(waiting), "--reason", "tidy", "--dsn", dsn)
    assert code == 0 and f"cancelled 1 waiting or dead job(s): {waiting}" in out


def test_cancel_by_filter_takes_at_most_100_jobs_unless_yes(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A payload filter matching 101 jobs is refused (exit 2, naming --yes) with nothing changed;
    with --yes it takes exactly its matches; --older-than and --task narrow a filter; a filter
    that matches nothing exits 1."""
    red = enqueue(dsn, "paint", [{"colour": "red", "n": i} for i in range(101)])
    [blue] = enqueue(dsn, "paint", [{"colour": "blue"}])
    [elsewhere] = enqueue(dsn, "other", [{"colour": "red"}])
    red_filter = ["--queue", "paint", "--contains", '{"colour": "red"}', "--reason", "wrong colour"]

    code, _, err = cli(capsys, "cancel", *red_filter, "--dsn", dsn)
    assert code == 2
    assert "more than 100 jobs match" in err and "--yes" in err and "nothing was cancelled" in err
    assert set(states(dsn).values()) == {"pending"}

    code, out, err = cli(capsys, "cancel", *red_filter, "--yes", "--dsn", dsn, "--json")
    assert code == 0, err
    assert json.loads(out) == {"cancelled": red, "revoked": [], "requeued": False}
    assert states(dsn) == {**{i: "cancelled" for i in red}, blue: "pending", elsewhere: "pending"}

    old = ["--queue", "other", "--task", "t.any", "--older-than", "1h", "--reason", "stale"]
    code, _, err = cli(capsys, "cancel", *old, "--dsn", dsn)
    assert code == 1 and "no job matches the filter" in err
    sql(
        dsn,
        "UPDATE tenure.jobs SET created_at = created_at - interval '2 hours' WHERE id = %s",
        (elsewhere,),
    )
    code, out, _ = cli(capsys, "cancel", *old, "--dsn", dsn)
    assert code == 0 and f"cancelled 1 waiting or dead job(s): {elsewhere}" in out
    assert states(dsn)[blue] == "pending"


def test_cancel_refuses_a_malformed_filter_before_touching_anything(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--contains that is not JSON or not an object, no target at all, and --requeue on a filter
    without --running each exit 2 with a message saying how to write it; no job changes."""
    enqueue(dsn, "q", [{"colour": "red"}])
    before = sql(dsn, SNAPSHOT)
    cases = [
        (["--contains", '{"colour": '], "--contains is not valid JSON"),
        (["--contains", '["red"]'], "--contains must be a JSON object"),
        (["--contains", '"red"'], "--contains must be a JSON object"),
        ([], "name the jobs to cancel"),
        (["--requeue"], "add --running too"),
    ]
    for extra, message in cases:
        queue = [] if not extra else ["--queue", "q"]
        code, _, err = cli(capsys, "cancel", *queue, *extra, "--reason", "x", "--dsn", dsn)
        assert code == 2 and message in err, (extra, err)
    assert sql(dsn, SNAPSHOT) == before


def test_cancel_revokes_running_jobs_or_gives_them_back_with_requeue(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A running job cancelled by id is revoked (cancelled, token moved, holder named in its
    history); with --requeue, by id or by --running filter, it is pending again under a new token
    with the attempt not counted; --requeue of a job that is not running exits 1."""
    ids = enqueue(dsn, "q", [{}, {}, {}])
    assert claim(dsn, "q", 3) == ids
    first, second, third = ids
    tokens = {i: row(dsn, i)["lease_token"] for i in ids}

    code, out, err = cli(capsys, "cancel", str(first), "--reason", "runaway", "--dsn", dsn, "--json")
    assert code == 0, err
    assert json.loads(out) == {"cancelled": [], "revoked": [first], "requeued": False}
    r = row(dsn, first)
    assert (r["state"], r["lease_token"], r["lease_owner"]) == ("cancelled", tokens[first] + 1, None)
    assert history(dsn, first)[-1] == ("revoke", default_actor(), "HELD_BY holder-1", "runaway")

    code, out, err = cli(capsys, "cancel", str(second), "--requeue", "--reason", "hung", "--dsn", dsn)
    assert code == 0, err
    assert "requeued 1 running job(s)" in out and str(second) in out
    r = row(dsn, second)
    assert (r["state"], r["lease_token"], r["attempt_count"]) == ("pending", tokens[second] + 1, 0)

    code, out, err = cli(
        capsys, "cancel", "--queue", "q", "--running", "--requeue", "--reason", "hung", "--dsn", dsn, "--json"
    )
    assert code == 0, err
    assert json.loads(out) == {"cancelled": [], "revoked": [third], "requeued": True}
    assert states(dsn) == {first: "cancelled", second: "pending", third: "pending"}

    code, _, err = cli(capsys, "cancel", str(second), "--requeue", "--reason", "x", "--dsn", dsn)
    assert code == 1 and f"job {second} is pending: requeue gives back running jobs only" in err


def test_retry_runs_waiting_jobs_now_and_reprocesses_finished_failures(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """retry makes a scheduled job due now and gives cancelled and dead jobs --attempts more
    attempts, each with a history entry; a running id refuses the whole call (exit 1)."""
    [busy] = enqueue(dsn, "run", [{}])
    assert claim(dsn, "run", 1) == [busy]
    [later] = enqueue(dsn, "q", [{}], delay=3600)
    [cancelled, dead] = enqueue(dsn, "q", [{}, {}])
    sql(
        dsn,
        "UPDATE tenure.jobs SET state = 'cancelled', finished_at = now() WHERE id = %s",
        (cancelled,),
    )
    make_dead(dsn, dead)

    before = sql(dsn, SNAPSHOT) + sql(dsn, EVENTS)
    code, _, err = cli(capsys, "retry", str(later), str(busy), "--reason", "now", "--dsn", dsn)
    assert code == 1 and f"job {busy} is running" in err and "nothing was retried" in err
    assert sql(dsn, SNAPSHOT) + sql(dsn, EVENTS) == before

    args = ["retry", str(later), str(cancelled), str(dead), "--reason", "fixed", "--attempts", "3"]
    code, out, err = cli(capsys, *args, "--actor", "ops-bob", "--dsn", dsn, "--json")
    assert code == 0, err
    assert json.loads(out) == {"retried": [later, cancelled, dead]}
    assert {i: states(dsn)[i] for i in (later, cancelled, dead)} == dict.fromkeys(
        (later, cancelled, dead), "pending"
    )
    [(due,)] = sql(dsn, "SELECT available_at <= now() FROM tenure.jobs WHERE id = %s", (later,))
    assert due
    assert row(dsn, dead)["max_attempts"] == 1 + 3
    assert history(dsn, later)[-1] == ("retry_now", "ops-bob", None, "fixed")
    assert history(dsn, dead)[-1] == ("reprocess", "ops-bob", None, "fixed")

    code, _, err = cli(capsys, "retry", str(dead), "--attempts", "0", "--reason", "x", "--dsn", dsn)
    assert code == 2 and "must be an integer >= 1" in err


def test_a_paused_queue_is_listed_paused_not_claimed_and_drains_once_resumed(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """queues list shows counts, live workers and the pause (who, why, since); a real worker does
    not claim from the paused queue but does from others; after resume it drains; resuming again
    or pausing an unknown queue exits 1 and changes nothing."""
    app = tenure.Tenure(dsn)

    @app.task(name="t.slow", queue="slow")
    def slow(ctx: tenure.JobContext) -> None:
        pass

    @app.task(name="t.fast", queue="fast")
    def fast(ctx: tenure.JobContext) -> None:
        pass

    held = [app.enqueue_sync(slow).id for _ in range(3)]
    free = app.enqueue_sync(fast).id
    sql(
        dsn,
        "INSERT INTO tenure.workers (id, queues, concurrency, seen_at) VALUES"
        " ('w-live', '{slow,fast}', 4, now()), ('w-gone', '{slow}', 1, now() - interval '1 hour')",
    )
    code, out, err = cli(
        capsys,
        "queues",
        "pause",
        "slow",
        "--reason",
        "deploy",
        "--actor",
        "ops-alice",
        "--dsn",
        dsn,
        "--json",
    )
    assert code == 0, err
    pause = json.loads(out)
    assert (pause["queue"], pause["until"], pause["actor"], pause["reason"]) == (
        "slow",
        None,
        "ops-alice",
        "deploy",
    )

    code, out, err = cli(capsys, "queues", "list", "--dsn", dsn, "--json")
    assert code == 0, err
    listed = {q["queue"]: q for q in json.loads(out)}
    assert set(listed) == {"slow", "fast"}
    s, f = listed["slow"], listed["fast"]
    assert (s["pending"], s["running"], s["workers"], s["paused"]) == (3, 0, 1, True)
    assert (s["paused_by"], s["pause_reason"], s["paused_until"]) == ("ops-alice", "deploy", None)
    assert (f["pending"], f["workers"], f["paused"], f["paused_at"]) == (1, 1, False, None)
    code, out, _ = cli(capsys, "queues", "list", "--dsn", dsn)
    assert code == 0 and "paused queues" in out and "deploy" in out and "ops-alice" in out and "ago" in out

    started = time.monotonic()
    run_worker_until(app, lambda: states(dsn)[free] == "succeeded" and time.monotonic() - started > 0.5)
    assert [states(dsn)[i] for i in held] == ["pending"] * 3

    code, out, err = cli(capsys, "queues", "resume", "slow", "--reason", "deploy done", "--dsn", dsn)
    assert code == 0 and "resumed" in out, err
    code, out, _ = cli(capsys, "queues", "list", "--dsn", dsn, "--json")
    assert {q["queue"]: q["paused"] for q in json.loads(out)} == {"slow": False, "fast": False}
    run_worker_until(app, lambda: all(states(dsn)[i] == "succeeded" for i in held))
    assert sql(dsn, "SELECT event, actor, reason FROM tenure.queue_events ORDER BY id") == [
        ("pause", "ops-alice", "deploy"),
        ("resume", default_actor(), "deploy done"),
    ]

    code, _, err = cli(capsys, "queues", "resume", "slow", "--dsn", dsn)
    assert code == 1 and "queue 'slow' is not paused" in err
    code, _, err = cli(capsys, "queues", "pause", "nosuch", "--reason", "x", "--dsn", dsn)
    assert code == 1 and "no job was ever enqueued to queue 'nosuch'" in err and "--allow-unknown" in err
    assert sql(dsn, "SELECT count(*) FROM tenure.queue_pauses") == [(0,)]
    code, _, err = cli(
        capsys, "queues", "pause", "nosuch", "--reason", "early", "--allow-unknown", "--dsn", dsn
    )
    assert code == 0, err
    assert sql(dsn, "SELECT queue FROM tenure.queue_pauses") == [("nosuch",)]


def test_pause_until_takes_a_duration_or_a_zoned_time_and_refuses_anything_else(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--until 30m ends the pause 30 minutes after it began; an ISO time with a timezone is taken
    as given; a word, a time without a timezone or one in the past exits 2 leaving the pause as
    it was."""
    enqueue(dsn, "q", [{}])
    code, out, err = cli(
        capsys, "queues", "pause", "q", "--reason", "window", "--until", "30m", "--dsn", dsn, "--json"
    )
    assert code == 0, err
    pause = json.loads(out)
    length = datetime.fromisoformat(pause["until"]) - datetime.fromisoformat(pause["paused_at"])
    assert abs(length - timedelta(minutes=30)) < timedelta(seconds=5)

    code, out, err = cli(
        capsys,
        "queues",
        "pause",
        "q",
        "--reason",
        "freeze",
        "--until",
        "2099-01-02T03:04:05+02:00",
        "--dsn",
        dsn,
    )
    assert code == 0 and "paused until 2099-01-02T01:04:05+00:00" in out, err
    stored = sql(dsn, "SELECT until, reason FROM tenure.queue_pauses")
    assert stored == [(datetime.fromisoformat("2099-01-02T03:04:05+02:00"), "freeze")]

    for bad, message in (
        ("tomorrow", "is neither a duration"),
        ("2099-01-02T03:04:05", "has no timezone"),
        ("2001-01-01T00:00:00Z", "is not in the future"),
    ):
        code, _, err = cli(capsys, "queues", "pause", "q", "--reason", "x", "--until", bad, "--dsn", dsn)
        assert code == 2 and message in err, (bad, err)
    assert sql(dsn, "SELECT until, reason FROM tenure.queue_pauses") == stored
    code, out, _ = cli(capsys, "queues", "list", "--dsn", dsn, "--json")
    [q] = json.loads(out)
    assert q["paused"] and q["pause_reason"] == "freeze"


def test_result_prints_json_and_waits_only_when_asked(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """result of an unfinished job exits 1 suggesting --wait, or with --wait times out (exit 1);
    a succeeded job's result is JSON on stdout, also after --wait for a job that was not yet due;
    a dead job exits 1 with its last error."""
    app = tenure.Tenure(dsn)

    @app.task(name="t.add")
    def add(ctx: tenure.JobContext, a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @app.task(name="t.broken", max_attempts=1)
    def broken(ctx: tenure.JobContext) -> None:
        raise tenure.Permanent("bad input", code="BAD_INPUT")

    ok = app.enqueue_sync(add, {"a": 2, "b": 3}, result_wanted=True).id
    bad = app.enqueue_sync(broken).id
    code, out, err = cli(capsys, "result", str(ok), "--dsn", dsn)
    assert code == 1 and out == ""
    assert f"job {ok} is pending, not finished" in err and "--wait" in err
    code, _, err = cli(capsys, "result", str(ok), "--wait", "0.3", "--dsn", dsn)
    assert code == 1 and f"job {ok} is still pending after 0.3s" in err
    code, _, err = cli(capsys, "result", "999999", "--dsn", dsn)
    assert code == 1 and "there is no job 999999" in err

    run_worker_until(app, lambda: states(dsn)[ok] == "succeeded" and states(dsn)[bad] == "dead")
    code, out, err = cli(capsys, "result", str(ok), "--dsn", dsn)
    assert code == 0 and json.loads(out) == {"sum": 5}, err
    code, out, err = cli(capsys, "result", str(ok), "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out) == {"sum": 5} and err == ""
    code, out, err = cli(capsys, "result", str(bad), "--dsn", dsn)
    assert code == 1 and out == "" and f"job {bad} is dead: BAD_INPUT" in err and "bad input" in err

    later = app.enqueue_sync(add, {"a": 20, "b": 22}, delay=1.0, result_wanted=True).id
    later_bad = app.enqueue_sync(broken, delay=1.0, result_wanted=True).id
    with worker_in_background(app):
        code, out, err = cli(capsys, "result", str(later), "--wait", "20", "--dsn", dsn, "--json")
        assert code == 0 and json.loads(out) == {"sum": 42}, err
        code, out, err = cli(capsys, "result", str(later_bad), "--wait", "20", "--dsn", dsn)
        assert code == 1 and f"job {later_bad} is dead: BAD_INPUT" in err


def test_enqueue_with_a_unique_key_says_which_job_holds_it(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tenure enqueue --unique-key` twice: the second names the first job and stores nothing;
    `tenure unique show` lists the key's job as its holder; an unknown key exits 1."""
    base = ["enqueue", "ops.u", "--by-name", "--queue", "q", "--dsn", dsn, "--unique-key", "nightly"]
    code, out, err = cli(capsys, *base, "--json")
    assert code == 0, err
    first = json.loads(out)
    code, out, _ = cli(capsys, *base)
    assert code == 0 and f"job {first['id']} already holds the unique key ops.u:nightly" in " ".join(
        out.split()
    )
    code, out, _ = cli(capsys, "unique", "show", "ops.u:nightly", "--dsn", dsn, "--json")
    assert code == 0 and [(r["id"], r["holds"]) for r in json.loads(out)] == [(first["id"], True)]
    code, out, _ = cli(capsys, "unique", "show", "ops.u:nightly", "--dsn", dsn)
    assert code == 0 and f"held by job {first['id']} (pending)" in out
    assert cli(capsys, "unique", "show", "ops.u:other", "--dsn", dsn)[0] == 1


def test_limits_list_shows_each_limited_queue_and_clear_removes_one(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A declared limit shows in `tenure limits list` with its running count; clear removes it;
    clearing a queue with no limit exits 1."""
    sql(
        dsn,
        "INSERT INTO tenure.queue_limits (queue, max_running, key_field, max_running_per_key, declared_by)"
        " VALUES ('mail', 3, 'customer', 1, 'w1')",
    )
    code, out, _ = cli(capsys, "limits", "list", "--dsn", dsn, "--json")
    assert code == 0
    [row] = json.loads(out)
    assert (row["queue"], row["max_running"], row["key_field"], row["running"]) == ("mail", 3, "customer", 0)
    code, out, _ = cli(capsys, "limits", "list", "--dsn", dsn)
    assert code == 0 and "1 per customer" in out
    assert cli(capsys, "limits", "clear", "mail", "--dsn", dsn)[0] == 0
    assert cli(capsys, "limits", "clear", "mail", "--dsn", dsn)[0] == 1

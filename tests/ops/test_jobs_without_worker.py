"""Jobs no live worker can run (a typo'd task name, a task registered by a script run directly,
`__main__.NAME`, a task whose workers serve other queues) are named with the fix by `tenure
status`, `tenure check --max-jobs-without-worker`, the `tenure_jobs_without_worker` gauge, and
read through their index whatever the backlog; jobs a live worker runs never are."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _ops import cli, run_worker_until, sql
from prometheus_client import CollectorRegistry

import tenure
from tenure.db.gauges import STRANDED_COUNT_LIMIT, snapshot_params
from tenure.db.migrate import migrate
from tenure.db.sqlfiles import named_queries
from tenure.ops.metrics import DatabaseCollector

TESTS_DIR = Path(__file__).resolve().parents[1]
TYPO = "apps.shop_app.sned"


def enqueue(capsys: pytest.CaptureFixture[str], dsn: str, task: str, queue: str, count: int = 1) -> None:
    for _ in range(count):
        code, _, err = cli(capsys, "enqueue", task, "--by-name", "--dsn", dsn, "--queue", queue)
        assert code == 0, err


def wait_for_tasks(dsn: str, worker: subprocess.Popen[str]) -> list[str]:
    """The tasks the worker's registry row lists, once it has written them."""
    deadline = time.monotonic() + 60
    while not (rows := sql(dsn, "SELECT tasks FROM tenure.workers WHERE tasks IS NOT NULL")):
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < deadline, "the worker never recorded its tasks"
        time.sleep(0.1)
    return list(rows[0][0])


def gauge_samples(dsn: str) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    collector = DatabaseCollector(dsn)
    registry.register(collector)
    try:
        return {
            (s.labels["queue"], s.labels["task"]): s.value
            for family in registry.collect()
            if family.name == "tenure_jobs_without_worker"
            for s in family.samples
        }
    finally:
        collector.close()


@pytest.mark.crash
def test_status_check_and_the_gauge_name_jobs_no_live_worker_runs(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a real `tenure worker apps.shop_app` running (queues emails and reports), jobs of a
    typo'd task, of `__main__.count_rows` and of reports.build in a queue no worker serves are
    named with their fix by `tenure status` (text and JSON), trip `tenure check
    --max-jobs-without-worker 0` and are the `tenure_jobs_without_worker` gauge's samples; the
    worker's own task in its queue is not among them."""
    enqueue(capsys, dsn, TYPO, "emails", count=3)
    enqueue(capsys, dsn, "__main__.count_rows", "reports")
    enqueue(capsys, dsn, "reports.build", "archive", count=2)
    enqueue(capsys, dsn, "reports.build", "reports")  # runs (and fails on its payload): not stranded
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
    argv = ["worker", "apps.shop_app", "--dsn", dsn, "--poll-interval", "0.1", "--worker-id", "shop-1"]
    with subprocess.Popen(
        [sys.executable, "-m", "tenure", *argv], env=env, cwd=TESTS_DIR, stderr=subprocess.PIPE, text=True
    ) as worker:
        try:
            assert wait_for_tasks(dsn, worker) == ["apps.shop_app.send", "reports.build"]
            code, out, _ = cli(capsys, "status", "--dsn", dsn)
            flat = " ".join(out.split())
            code_json, out_json, _ = cli(capsys, "status", "--dsn", dsn, "--json")
            code_off, _, _ = cli(capsys, "check", "--dsn", dsn)
            code_on, check, _ = cli(capsys, "check", "--dsn", dsn, "--max-jobs-without-worker", "0", "--json")
            samples = gauge_samples(dsn)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=60)
    assert worker.returncode == 0
    assert code == 0
    assert (
        f"3 jobs of task {TYPO} wait in queue emails, and no live worker registers {TYPO}: start a "
        "worker that imports the module defining it (a task registered in a script run directly is "
        "named __main__.sned)" in flat
    ), flat
    assert (
        "1 job of task __main__.count_rows waits in queue reports, and no live worker registers "
        "__main__.count_rows: it was registered in a script run directly" in flat
    ), flat
    assert (
        "2 jobs of task reports.build wait in queue archive, and no live worker that registers "
        "reports.build serves archive: start one whose --queues include archive" in flat
    ), flat
    assert code_json == 0
    stranded = {
        (r["task"], r["queue"]): (r["jobs"], r["registered"])
        for r in json.loads(out_json)["jobs_without_worker"]
    }
    assert stranded == {
        ("__main__.count_rows", "reports"): (1, False),
        (TYPO, "emails"): (3, False),
        ("reports.build", "archive"): (2, True),
    }
    assert code_off == 0  # off unless asked for, as the other counts are
    problems = json.loads(check)["problems"]
    assert code_on == 1 and len(problems) == 3 and any(TYPO in p for p in problems), problems
    assert samples == {
        ("emails", TYPO): 3.0,
        ("reports", "__main__.count_rows"): 1.0,
        ("archive", "reports.build"): 2.0,
    }


def test_no_live_worker_strands_every_waiting_job_and_counts_stop_at_the_limit(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker silent past --stale-after runs nothing: its tasks' jobs are stranded too; a task
    with more jobs than the count limit is reported as "at least" the limit; a worker row of an
    earlier version (no task list) counts as running every task of its queues."""
    sql(
        dsn,
        "INSERT INTO tenure.jobs (queue, task) SELECT 'emails', 'shop.send' FROM generate_series(1, %s)",
        (STRANDED_COUNT_LIMIT + 5,),
    )
    sql(
        dsn,
        "INSERT INTO tenure.workers (id, queues, concurrency, seen_at, tasks) "
        "VALUES ('gone', '{emails}', 4, now() - interval '10 minutes', '{shop.send}')",
    )
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--stale-after", "1m")
    assert code == 0
    assert f"at least {STRANDED_COUNT_LIMIT:,} jobs of task shop.send wait in queue emails" in " ".join(
        out.split()
    )
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--stale-after", "20m")
    assert (
        json.loads(cli(capsys, "status", "--dsn", dsn, "--json", "--stale-after", "20m")[1])[
            "jobs_without_worker"
        ]
        == []
    )
    sql(dsn, "INSERT INTO tenure.workers (id, queues, concurrency) VALUES ('older-version', '{emails}', 4)")
    code, out, _ = cli(capsys, "status", "--dsn", dsn, "--json", "--stale-after", "1m")
    assert json.loads(out)["jobs_without_worker"] == []


def test_the_gauge_reads_its_index_on_a_table_never_analyzed(dsn: str) -> None:
    """On 200k waiting jobs that were never analyzed, the jobs-without-worker statement reads
    jobs only through the claim's indexes (it has none of its own), in its custom and its generic
    plan (a pooled connection may prepare it): no sequential scan of jobs."""
    sql(
        dsn,
        "INSERT INTO tenure.jobs (queue, task) SELECT 'q' || (g % 5), 'shop.t' || (g % 40) "
        "FROM generate_series(1, 200000) g",
    )
    statement = named_queries("tenure")["gauge_jobs_without_worker"]
    params = snapshot_params(10.0, 60.0, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        custom = conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params).fetchone()
        numbers: dict[str, int] = {}
        generic_text = re.sub(
            r"%\((\w+)\)s", lambda m: f"${numbers.setdefault(m.group(1), len(numbers) + 1)}", statement
        )
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            conn.execute(f"PREPARE stranded AS {generic_text}".encode())
            args = ", ".join("NULL" if params[n] is None else repr(params[n]) for n in numbers)
            generic = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE stranded({args})".encode()).fetchone()
    for plan in (custom, generic):
        assert plan is not None
        text = json.dumps(plan[0])
        nodes = _nodes(plan[0][0]["Plan"])
        assert {n.get("Index Name") for n in nodes} & {"jobs_claimable_idx", "jobs_claimable_by_age_idx"}, (
            text
        )
        assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"], (
            text
        )


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def test_a_worker_on_a_schema_before_the_task_list_still_registers_and_scrapes(empty_dsn: str) -> None:
    """A worker of this version on a schema of migration 20 (before the task list) keeps its
    registry row, without tasks, and its metrics scrape reads every other gauge: the new gauge
    reads as empty instead of failing the scrape."""

    async def migrate_to_20() -> None:
        async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
            await migrate(conn, "tenure", up_to=20)

    asyncio.run(migrate_to_20())
    app = tenure.Tenure(empty_dsn)

    @app.task(name="old.job")
    def job(ctx: tenure.JobContext) -> None:
        pass

    app.enqueue_sync(job, {}, queue="elsewhere")
    registered = "SELECT id FROM tenure.workers"
    run_worker_until(app, lambda: bool(sql(empty_dsn, registered)), worker_id="old-schema-1")
    collector = DatabaseCollector(empty_dsn)
    try:
        snapshot = collector.read()
    finally:
        collector.close()
    assert snapshot.without_worker == [] and [q.queue for q in snapshot.queues] == ["elsewhere"]

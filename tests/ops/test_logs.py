"""Structured logs: every line about a job carries its id, queue, task, attempt, token and
worker; payload values never reach the logs, and messages are bounded."""

from __future__ import annotations

import io
import json
import logging
import sys

import psycopg
import pytest
from _ops import run_worker_until, sql

import tenure
from tenure.telemetry.logging_context import JOB_FIELDS, MAX_MESSAGE_CHARS, JsonFormatter, configure_logging

SECRET = "sk_live_51HzT0pSecretValue"


@pytest.mark.filterwarnings("ignore:payload.api_key")  # the credential warning: this test wants one there
def test_job_lines_name_the_job_and_a_secret_payload_value_never_reaches_the_logs(dsn: str) -> None:
    """A job whose payload holds a secret fails, retries, dies and is fenced: the JSON log lines about
    it carry every job field, and the secret (which did reach the stored error) is in none of them."""
    stream = io.StringIO()
    configure_logging(level=logging.DEBUG, fmt="json", stream=stream)
    try:
        app = tenure.Tenure(dsn)

        @app.task(name="ops.charge", max_attempts=2)
        def charge(ctx: tenure.JobContext, api_key: str) -> None:
            raise ValueError(f"card declined for key {api_key}")  # a careless message quoting the payload

        @app.task(name="ops.usurped", max_attempts=1)
        def usurped(ctx: tenure.JobContext, api_key: str) -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "UPDATE tenure.jobs SET lease_token = lease_token + 1 WHERE id = %s", (ctx.job_id,)
                )

        charged = app.enqueue_sync(charge, {"api_key": SECRET}).id
        fenced = app.enqueue_sync(usurped, {"api_key": SECRET}).id

        def settled() -> bool:
            rows = dict(sql(dsn, "SELECT id, state::text FROM tenure.jobs"))
            events = sql(dsn, "SELECT count(*) FROM tenure.job_events WHERE event = 'fencing_lost'")
            return rows[charged] == "dead" and events[0][0] >= 1

        run_worker_until(app, settled, worker_id="logs-test-worker")
    finally:
        configure_logging(level=logging.WARNING)  # back to the plain handler on stderr
    [(stored_error,)] = sql(dsn, "SELECT last_error FROM tenure.jobs WHERE id = %s", (charged,))
    assert SECRET in stored_error  # the secret was on the error path ...
    text = stream.getvalue()
    assert SECRET not in text  # ... and never reached a log line
    lines = [json.loads(line) for line in text.splitlines()]
    about_jobs = [line for line in lines if "job_id" in line]
    assert {line["job_id"] for line in about_jobs} >= {charged, fenced}
    for line in about_jobs:
        assert set(JOB_FIELDS) <= set(line), line
        assert line["worker"] == "logs-test-worker"
    dead_line = next(line for line in about_jobs if "is dead" in line["msg"])
    assert (dead_line["job_id"], dead_line["task"], dead_line["attempt"]) == (charged, "ops.charge", 2)
    assert any(line["job_id"] == fenced and "fence" in line["msg"] for line in about_jobs)


def test_long_messages_and_exception_text_are_cut_to_a_bound() -> None:
    """A 10 000-character message and exception text are bounded in the JSON line."""
    record = logging.LogRecord("tenure.worker", logging.WARNING, __file__, 1, "x" * 10_000, None, None)
    try:
        raise RuntimeError("y" * 10_000)
    except RuntimeError:
        record.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(record))
    assert len(line["msg"]) == MAX_MESSAGE_CHARS
    assert line["error_type"] == "RuntimeError" and len(line["error"]) <= 200

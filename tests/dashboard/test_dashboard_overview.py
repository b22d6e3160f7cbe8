"""The overview's per-queue numbers on a small table: waiting, running and dead jobs counted
exactly, finished ones over the last hour."""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest
from _dashboard_jobs import dashboard_client
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app

CELL = re.compile(r'data-label="(\w+)(?:, last hour)?"><a [^>]*>(\d+)</a>')

#: (state, how many, finished how long ago) per queue; waiting and running jobs have no finish.
JOBS = {
    "mail": [
        ("pending", 3, None),
        ("scheduled", 2, None),
        ("running", 1, None),
        ("succeeded", 4, "5 minutes"),
        ("succeeded", 5, "3 hours"),
        ("cancelled", 1, "50 minutes"),
        ("cancelled", 2, "2 days"),
        ("dead", 1, "10 minutes"),
        ("dead", 2, "30 days"),
    ],
    "billing": [("pending", 1, None), ("succeeded", 2, "1 minute"), ("dead", 1, "2 hours")],
    "archive": [("succeeded", 7, "1 day")],
}


#: How each kind of job is put in place: %(queue)s, %(n)s jobs, finished %(ago)s ago.
INSERTS = {
    "pending": "INSERT INTO tenure.jobs (queue, task) SELECT %(queue)s, 't' FROM generate_series(1, %(n)s)",
    "scheduled": "INSERT INTO tenure.jobs (queue, task, state, available_at) "
    "SELECT %(queue)s, 't', 'scheduled', now() + interval '1 hour' FROM generate_series(1, %(n)s)",
    "running": "INSERT INTO tenure.jobs (queue, task, state, lease_owner, lease_token, attempt_count, "
    "attempted_at, lease_expires_at, lease_deadline) SELECT %(queue)s, 't', 'running', 'w', 1, 1, "
    "now(), now() + interval '1 minute', now() + interval '1 hour' FROM generate_series(1, %(n)s)",
    "finished": "INSERT INTO tenure.jobs (queue, task, state, attempt_count, lease_token, finished_at) "
    "SELECT %(queue)s, 't', %(state)s, 1, 1, now() - %(ago)s::interval FROM generate_series(1, %(n)s)",
}


@pytest.fixture
def http(dsn: str) -> Iterator[TestClient]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue, groups in JOBS.items():
            for state, n, ago in groups:
                insert = INSERTS.get(state, INSERTS["finished"])
                conn.execute(insert, {"queue": queue, "state": state, "n": n, "ago": ago})
    with dashboard_client(create_app(dsn)) as client:
        yield client


def counts_of(html: str, queue: str) -> dict[str, int]:
    row = html.split(f'data-queue="{queue}"')[1].split("</tr>")[0]
    return {state: int(n) for state, n in CELL.findall(row)}


def test_the_overview_counts_waiting_running_and_dead_jobs_and_the_last_hours_finished_ones(
    http: TestClient,
) -> None:
    """Each queue shows its scheduled, pending, running and dead jobs, all of them, and the jobs
    that succeeded or were cancelled in the last hour; the header says which are the last hour's."""
    for path in ("/", "/overview/live"):
        page = http.get(path)
        assert page.status_code == 200
        assert counts_of(page.text, "mail") == {
            "scheduled": 2,
            "pending": 3,
            "running": 1,
            "waiting": 0,
            "succeeded": 4,
            "dead": 3,
            "cancelled": 1,
        }
        assert counts_of(page.text, "billing") == {
            "scheduled": 0,
            "pending": 1,
            "running": 0,
            "waiting": 0,
            "succeeded": 2,
            "dead": 1,
            "cancelled": 0,
        }
        assert 'data-queue="archive"' not in page.text  # nothing waits, runs or died; nothing recent
        header = page.text.split('<table class="queues')[1].split("</thead>")[0]
        assert re.search(r"succeeded\s*<span[^>]*>last hour</span>", header)
        assert re.search(r"cancelled\s*<span[^>]*>last hour</span>", header)

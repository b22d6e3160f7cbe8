"""The Schedules page against a real database: a schedule this host cannot read, and who paused
and resumed each schedule."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from _dashboard_jobs import dashboard_client
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def http(dsn: str) -> Iterator[TestClient]:
    with dashboard_client(create_app(dsn)) as client:
        yield client


def sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def add_schedule(dsn: str, name: str, cron: str, timezone: str = "UTC") -> None:
    """A schedule row as a worker of some other version of the app, or a hand, might write it."""
    sql(
        dsn,
        "INSERT INTO tenure.schedules (name, task, queue, cron, timezone, last_slot) "
        "VALUES (%s, 'app.report', 'reports', %s, %s, now())",
        (name, cron, timezone),
    )


def row_of(html: str, name: str) -> str:
    return html.split(f'data-schedule="{name}"')[1].split("</tr>")[0]


def test_a_schedule_with_an_invalid_cron_is_marked_and_the_others_are_shown(
    http: TestClient, dsn: str
) -> None:
    """A cron that cannot be parsed makes its own row say so (marked broken, the reason where the
    next fire goes); the page is a 200 and the valid schedule shows its next fire."""
    add_schedule(dsn, "a.good", "0 3 * * *")
    add_schedule(dsn, "b.broken", "not a cron")
    page = http.get("/schedules")
    assert page.status_code == 200
    broken = page.text.split('data-schedule="b.broken"')[0].rsplit("<tr", 1)[1] + row_of(
        page.text, "b.broken"
    )
    assert 'class="broken"' in broken and "invalid cron: wrong number of fields" in broken
    assert '<span class="badge dead">broken</span>' in broken
    good = row_of(page.text, "a.good")
    assert "03:00:00 UTC" in good and "invalid" not in good and "broken" not in good


def test_resuming_a_schedule_records_who_when_and_why_and_the_page_shows_it(
    http: TestClient, dsn: str
) -> None:
    """A resume from the dashboard is kept on the schedule as its pause is (the dashboard actor,
    the time, the reason), and the Schedules page shows it where it shows a pause."""
    add_schedule(dsn, "nightly", "0 3 * * *")
    token = CSRF.search(http.get("/schedules").text)
    assert token
    form = {"csrf": token.group(1)}
    assert http.post("/schedules/nightly/pause", data={**form, "reason": "month end"}).status_code == 200
    assert http.post("/schedules/nightly/resume", data={**form, "reason": "books closed"}).status_code == 200
    [(by, why, recorded)] = sql(
        dsn,
        "SELECT resumed_by, resume_reason, resumed_at IS NOT NULL FROM tenure.schedules "
        "WHERE name = 'nightly'",
    )
    assert (by, why, recorded) == ("dashboard:local", "books closed", True)
    row = row_of(http.get("/schedules").text, "nightly")
    assert "resumed" in row and "by dashboard:local: books closed" in row and "UTC" in row

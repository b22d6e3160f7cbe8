"""The dashboard's pages for what needs an operator (dead jobs, uncertain effects, blocked
ordering keys, schedules, limits, workers) and their acts, over HTTP against a real database."""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest
from _dashboard_jobs import Attention, Seeded, dashboard_client, seed, seed_attention
from _dashboard_jobs import fetch_one as one
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def seeded(dsn: str) -> tuple[Seeded, Attention]:
    return seed(dsn), seed_attention(dsn)


@pytest.fixture
def http(dsn: str, seeded: tuple[Seeded, Attention]) -> Iterator[TestClient]:
    with dashboard_client(create_app(dsn)) as client:
        yield client


def state_of(dsn: str, job_id: int) -> str:
    return str(one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", job_id)[0])


def csrf(http: TestClient, path: str = "/") -> str:
    found = CSRF.search(http.get(path).text)
    assert found
    return found.group(1)


def hidden_fields(html: str, form_class: str) -> dict[str, str]:
    form = html.split(f'class="act {form_class}"')[1].split("</form>")[0]
    return dict(re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', form))


def test_each_page_lists_what_needs_an_operator(http: TestClient, seeded: tuple[Seeded, Attention]) -> None:
    """Dead jobs grouped by error, the uncertain effect, the blocked key with two waiting, the
    schedule with its next fire, the limit with its slots and the worker each appear on their page."""
    _, attention = seeded
    dead = http.get("/dead")
    assert dead.status_code == 200 and 'aria-current="page"' in dead.text.split("</nav>")[0]
    assert "CARD_DECLINED" in dead.text and "LEDGER_CLOSED" in dead.text and "TIMEOUT" in dead.text
    assert '<strong class="matching">3</strong>' in dead.text and "(every dead job)" in dead.text
    effects = http.get("/effects")
    row = effects.text.split(f'data-effect="{attention.uncertain_effect}"')[1].split("</tr>")[0]
    assert "charge-card" in row and 'value="not_happened"' in row and 'value="done"' in row
    ordering = http.get("/ordering")
    blocked = ordering.text.split('data-key="acct-1"')[1].split("</tr>")[0]
    assert f"/jobs/{attention.blocked_head}" in blocked and '<td class="num">2</td>' in blocked
    schedules = http.get("/schedules")
    nightly = schedules.text.split('data-schedule="nightly-report"')[1].split("</tr>")[0]
    assert "0 3 * * *" in nightly and "active" in nightly and "03:00:00 UTC" in nightly
    limits = http.get("/limits")
    payments = limits.text.split('data-queue="payments"')[1].split("</tr>")[0]
    assert '<td class="num">0</td>' in payments and '<td class="num">2</td>' in payments
    workers = http.get("/workers")
    assert "w-1" in workers.text and "3/8" in workers.text


def test_bulk_reprocess_shows_the_count_first_then_moves_exactly_those_jobs(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """Filtering dead jobs by queue shows how many match; the act carries that count, moves those
    jobs to pending with the dashboard actor and reason in their history, and leaves the others dead."""
    jobs, attention = seeded
    page = http.get("/dead", params={"queue": "billing"})
    assert '<strong class="matching">1</strong>' in page.text and "Reprocess 1 job(s)" in page.text
    fields = hidden_fields(page.text, "bulk")
    assert fields["expect"] == "1" and fields["queue"] == "billing"
    done = http.post("/dead/reprocess", data={**fields, "reason": "card processor fixed", "attempts": "2"})
    assert done.status_code == 200 and "1 dead job(s) are pending again" in done.text
    assert state_of(dsn, jobs.dead) == "pending"
    assert one(dsn, "SELECT max_attempts - attempt_count FROM tenure.jobs WHERE id = %s", jobs.dead) == (2,)
    assert one(
        dsn,
        "SELECT event, worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC",
        jobs.dead,
    ) == ("reprocess", "dashboard:local", "card processor fixed")
    assert (
        state_of(dsn, attention.blocked_head) == "dead" and state_of(dsn, attention.uncertain_job) == "dead"
    )


def test_a_bulk_reprocess_whose_count_changed_meanwhile_is_refused_and_changes_nothing(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """The page showed 1 dead billing job; another died before the act: 409 naming both counts,
    and both jobs stay dead. A form without the count is a 400."""
    jobs, _ = seeded
    fields = hidden_fields(http.get("/dead", params={"queue": "billing"}).text, "bulk")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO tenure.jobs (queue, task, state, finished_at) "
            "VALUES ('billing', 'billing.charge', 'dead', now()) RETURNING id"
        ).fetchone()
    assert row is not None
    refused = http.post("/dead/reprocess", data={**fields, "reason": "retry all"})
    assert refused.status_code == 409
    assert "2 dead jobs match this filter now, not the 1 the page showed" in refused.text
    assert "Nothing was reprocessed" in refused.text
    assert state_of(dsn, jobs.dead) == "dead" and state_of(dsn, int(row[0])) == "dead"
    no_count = {k: v for k, v in fields.items() if k != "expect"}
    assert http.post("/dead/reprocess", data={**no_count, "reason": "x"}).status_code == 400
    assert state_of(dsn, jobs.dead) == "dead"


def test_a_refused_bulk_reprocess_counts_what_matches_now_up_to_the_cap(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """When fewer jobs match than the page showed, the refusal gives the number; when more than
    one act may move have died since, it says "more than 10,000" rather than counting them all."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, state, finished_at) "
            "SELECT 'bulk', 'bulk.t', 'dead', now() FROM generate_series(1, 2)"
        )
    fields = hidden_fields(http.get("/dead", params={"queue": "bulk"}).text, "bulk")
    assert fields["expect"] == "2"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE tenure.jobs SET state = 'cancelled' WHERE id = (SELECT min(id) FROM tenure.jobs "
            "WHERE queue = 'bulk')"
        )
    fewer = http.post("/dead/reprocess", data={**fields, "reason": "retry all"})
    assert fewer.status_code == 409
    assert "1 dead job matches this filter now, not the 2 the page showed" in fewer.text
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task, state, finished_at) "
            "SELECT 'bulk', 'bulk.t', 'dead', now() FROM generate_series(1, 10000)"
        )
    many = http.post("/dead/reprocess", data={**fields, "reason": "retry all"})
    assert many.status_code == 409
    assert "more than 10,000 dead jobs match this filter now, not the 2 the page showed" in many.text
    assert one(dsn, "SELECT count(*) FROM tenure.jobs WHERE queue = 'bulk' AND state = 'dead'") == (10_001,)


def test_skipping_a_blocked_head_cancels_it_in_the_audit_log_and_a_second_skip_is_refused(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """Skip cancels the dead head with ORDERING_SKIP by the dashboard actor, the key leaves the
    blocked page, and its waiting jobs are untouched; skipping it again answers 409."""
    _, attention = seeded
    token = csrf(http, "/ordering")
    done = http.post(
        f"/jobs/{attention.blocked_head}/skip", data={"reason": "ledger reopened", "csrf": token}
    )
    assert done.status_code == 200 and "was skipped" in done.text
    assert state_of(dsn, attention.blocked_head) == "cancelled"
    assert one(
        dsn,
        "SELECT error_code, worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC",
        attention.blocked_head,
    ) == ("ORDERING_SKIP", "dashboard:local", "ledger reopened")
    assert 'data-key="acct-1"' not in http.get("/ordering").text
    assert {state_of(dsn, j) for j in attention.waiting} == {"pending"}
    again = http.post(f"/jobs/{attention.blocked_head}/skip", data={"reason": "again", "csrf": token})
    assert again.status_code == 409 and "nothing was skipped" in again.text


def test_an_uncertain_effect_takes_one_verdict_recorded_with_who_and_why(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """'It did not happen' records not_happened with the dashboard actor and reason and leads to
    the job's page; a second verdict is refused with 409, and a made-up verdict is a 400."""
    _, attention = seeded
    token = csrf(http, "/effects")
    path = f"/effects/{attention.uncertain_effect}/resolve"
    assert http.post(path, data={"reason": "x", "csrf": token, "verdict": "maybe"}).status_code == 400
    done = http.post(path, data={"reason": "no charge at the bank", "csrf": token, "verdict": "not_happened"})
    assert done.status_code == 200 and "recorded as not happened" in done.text
    assert f"Job {attention.uncertain_job}" in done.text
    assert one(
        dsn,
        "SELECT state, resolved_by, reason FROM tenure.job_effects WHERE id = %s",
        attention.uncertain_effect,
    ) == ("not_happened", "dashboard:local", "no charge at the bank")
    again = http.post(path, data={"reason": "late", "csrf": token, "verdict": "done"})
    assert again.status_code == 409 and "not uncertain now" in again.text
    assert "No effect is uncertain" in http.get("/effects").text


def test_pausing_and_resuming_a_schedule_each_work_once(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """Pause records the dashboard actor and reason on the schedule; a second pause, and a resume
    of a schedule that is not paused, are refused with 409."""
    token = csrf(http, "/schedules")
    paused = http.post("/schedules/nightly-report/pause", data={"reason": "month end", "csrf": token})
    assert paused.status_code == 200 and "The schedule is paused" in paused.text
    assert one(dsn, "SELECT paused, paused_by, pause_reason FROM tenure.schedules") == (
        True,
        "dashboard:local",
        "month end",
    )
    again = http.post("/schedules/nightly-report/pause", data={"reason": "again", "csrf": token})
    assert again.status_code == 409 and "already paused" in again.text
    assert (
        http.post("/schedules/nightly-report/resume", data={"reason": "done", "csrf": token}).status_code
        == 200
    )
    assert one(dsn, "SELECT paused FROM tenure.schedules") == (False,)
    not_paused = http.post("/schedules/nightly-report/resume", data={"reason": "x", "csrf": token})
    assert not_paused.status_code == 409 and "is not paused" in not_paused.text
    assert http.post("/schedules/no-such/pause", data={"reason": "x", "csrf": token}).status_code == 409


def test_jobs_filter_by_ordering_key_and_by_age(http: TestClient, seeded: tuple[Seeded, Attention]) -> None:
    """The ordering-key filter lists exactly the key's jobs; jobs enqueued just now are newer than
    an hour and none is older; an unreadable age is a 400 naming the format."""
    _, attention = seeded
    keyed = http.get("/jobs", params={"ordering_key": "acct-1"}).text
    assert set(map(int, re.findall(r'href="[^"]*/jobs/(\d+)"', keyed))) == {
        attention.blocked_head,
        *attention.waiting,
    }
    assert re.findall(r'href="[^"]*/jobs/(\d+)"', http.get("/jobs", params={"older_than": "1h"}).text) == []
    assert (
        len(re.findall(r'href="[^"]*/jobs/(\d+)"', http.get("/jobs", params={"newer_than": "1h"}).text)) == 11
    )
    bad = http.get("/jobs", params={"older_than": "yesterday"})
    assert bad.status_code == 400 and "write it like 90s, 15m, 12h or 30d" in bad.text


def test_the_overview_charts_retries_lease_expiries_and_fenced_writes(
    http: TestClient, dsn: str, seeded: tuple[Seeded, Attention]
) -> None:
    """Audit-log events of the last hour are counted in the trouble chart: the seeded lease expiry,
    and a retry and a fenced write added now."""
    jobs, _ = seeded
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.job_events (job_id, event, token) "
            "VALUES (%s, 'retry', 1), (%s, 'fencing_lost', 1)",
            (jobs.pending, jobs.pending),
        )
    page = http.get("/").text
    assert "1 retries" in page and "1 lease expiries" in page and "1 fenced writes" in page
    assert '<rect class="bar fencing_lost"' in page and '<rect class="bar lease_expired"' in page


def test_read_only_pages_offer_no_act(dsn: str, seeded: tuple[Seeded, Attention]) -> None:
    """With read_only, none of the new pages carries a form that acts, and their POSTs answer 403."""
    _, attention = seeded
    with dashboard_client(create_app(dsn, read_only=True)) as http:
        for path in ("/dead", "/effects", "/ordering", "/schedules", "/limits", "/workers"):
            page = http.get(path)
            assert page.status_code == 200 and 'name="reason"' not in page.text, path
        token = http.cookies["tenure_csrf"]
        refused = http.post(f"/jobs/{attention.blocked_head}/skip", data={"reason": "x", "csrf": token})
        assert refused.status_code == 403
    assert state_of(dsn, attention.blocked_head) == "dead"

"""A waiting job on the dashboard over HTTP against a real database: what its page shows of its
waits, the jobs list's waiting filter, and the two acts on a waiting job (end its wait, send a
signal) under the rules every act follows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from _dashboard_jobs import LOCAL, Waits, csrf_of, dashboard_client, seed_waits
from _dashboard_jobs import fetch_one as one
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app, token_auth

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def waits(dsn: str) -> Waits:
    return seed_waits(dsn)


@pytest.fixture
def http(dsn: str, waits: Waits) -> Iterator[TestClient]:
    with dashboard_client(create_app(dsn)) as client:
        yield client


def wait_row(html: str, name: str) -> str:
    return html.split(f'data-wait="{name}"')[1].split("</tr>")[0]


def untouched(dsn: str, waits: Waits) -> bool:
    """The approval job still waits, no signal was written and its history has no act in it."""
    state = one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", waits.approval)[0]
    wait = one(dsn, "SELECT state FROM tenure.job_waits WHERE job_id = %s", waits.approval)[0]
    signals = one(dsn, "SELECT count(*) FROM tenure.signals WHERE key <> 'approve:A-2'")[0]
    acts = one(
        dsn,
        "SELECT count(*) FROM tenure.job_events WHERE job_id = %s AND event <> 'wait'",
        waits.approval,
    )[0]
    return (state, wait, signals, acts) == ("waiting", "waiting", 0, 0)


def test_a_waiting_jobs_page_says_what_it_waits_for_since_and_until_when(
    http: TestClient, waits: Waits
) -> None:
    """The page of a job waiting for a signal names its key, since when and until when in relative
    times (absolute ones on hover), and offers both acts, the signal form prefilled with the key."""
    page = http.get(f"/jobs/{waits.approval}")
    assert page.status_code == 200 and '<span class="badge waiting">waiting</span>' in page.text
    now = page.text.split('<section class="waiting-now">')[1].split("</section>")[0]
    assert 'a signal to <code class="wait-key">approve:A-1</code>' in now
    assert re.search(r'since <time title="[^"]+ UTC">\d+\.\ds ago</time>', now)
    assert re.search(r'until <time title="[^"]+ UTC">in 3\.0d</time>', now)
    assert 'class="act end-wait"' in now and 'value="end_wait"' in now
    assert 'name="key" value="approve:A-1"' in now
    assert 'value="cancel"' in page.text  # a waiting job can be cancelled like a queued one
    row = wait_row(page.text, "approve:A-1")
    assert "waiting now" in row and "signal <code>approve:A-1</code>" in row
    assert "wait approve:A-1 for a signal to approve:A-1" in page.text.split('<ol class="timeline">')[1]


def test_each_wait_a_job_began_shows_how_it_ended_with_the_signal_masked(
    http: TestClient, waits: Waits
) -> None:
    """A job lists every wait it began: the signalled one with its signal's payload (a credential
    in it masked), the sleep it is in now (a time, so no signal form), and a timed out one."""
    page = http.get(f"/jobs/{waits.sleeping}")
    signalled = wait_row(page.text, "approve:A-2")
    assert '<span class="badge signalled">signalled</span>' in signalled
    assert re.search(r"\d+\.\ds ago</time>", signalled)  # when it was signalled
    assert "&#34;by&#34;: &#34;ann&#34;" in signalled and "&#34;approved&#34;: true" in signalled
    assert "sk-9" not in page.text and "••••••" in signalled
    sleep = wait_row(page.text, "sleep#1")
    assert "waiting now" in sleep and "<td>time</td>" in sleep
    assert re.search(r">in (59\.9m|60\.0m)</time>", sleep)  # an hour's sleep, begun a moment ago
    now = page.text.split('<section class="waiting-now">')[1].split("</section>")[0]
    assert "Waits for a time" in now and 'class="act end-wait"' in now and 'class="act signal"' not in now
    timed_out = http.get(f"/jobs/{waits.timed_out}")
    assert '<span class="badge timed_out">timed out</span>' in wait_row(timed_out.text, "approve:A-3")
    assert '<section class="waiting-now">' not in timed_out.text


def test_the_jobs_list_filters_by_the_waiting_state(http: TestClient, waits: Waits) -> None:
    """`waiting` is one of the state filter's choices, and it lists exactly the waiting jobs."""
    page = http.get("/jobs", params={"state": "waiting"})
    assert page.status_code == 200 and '<option value="waiting" selected>' in page.text
    assert {int(n) for n in re.findall(r'href="[^"]*/jobs/(\d+)"', page.text)} == {
        waits.approval,
        waits.sleeping,
    }


def test_ending_a_wait_runs_the_job_again_at_once_and_records_who_and_why(
    http: TestClient, dsn: str, waits: Waits
) -> None:
    """End the wait: the job is pending and due now, its wait ended by the dashboard's actor, the
    history says why, the page says how it ended; a second try, the job no longer waiting, is a 409."""
    token = csrf_of(http, f"/jobs/{waits.approval}")
    done = http.post(
        f"/jobs/{waits.approval}/end-wait",
        data={"reason": "approved by phone", "csrf": token},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"].endswith("?done=wait_ended")
    assert one(
        dsn,
        "SELECT state::text, available_at <= now() FROM tenure.jobs WHERE id = %s",
        waits.approval,
    ) == ("pending", True)
    assert one(dsn, "SELECT state, ended_by FROM tenure.job_waits WHERE job_id = %s", waits.approval) == (
        "ended",
        "dashboard:local",
    )
    assert one(
        dsn,
        "SELECT event, worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1",
        waits.approval,
    ) == ("wait_ended", "dashboard:local", "wait approve:A-1 ended: approved by phone")
    page = http.get(done.headers["location"])
    assert "The job&#39;s wait was ended" in page.text
    assert "ended by dashboard:local" in wait_row(page.text, "approve:A-1")
    assert '<section class="waiting-now">' not in page.text
    again = http.post(f"/jobs/{waits.approval}/end-wait", data={"reason": "twice", "csrf": token})
    assert again.status_code == 409 and f"job {waits.approval} is pending now, not waiting" in again.text


def test_cancelling_a_waiting_job_cancels_its_wait(http: TestClient, dsn: str, waits: Waits) -> None:
    """Cancel on a waiting job's page cancels the job, and its wait reads as cancelled with it."""
    token = csrf_of(http, f"/jobs/{waits.approval}")
    page = http.post(f"/jobs/{waits.approval}/cancel", data={"reason": "order withdrawn", "csrf": token})
    assert page.status_code == 200 and "was cancelled" in page.text
    assert "cancelled with its job" in wait_row(page.text, "approve:A-1")
    assert one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", waits.approval) == ("cancelled",)


def test_a_signal_from_the_page_wakes_the_job_and_names_its_sender_and_reason(
    http: TestClient, dsn: str, waits: Waits
) -> None:
    """The signal form sends through signal(): the waiting job is pending with the signal's payload
    on its page, the signal names the dashboard's actor as its sender, and the job's history the
    reason."""
    token = csrf_of(http, f"/jobs/{waits.approval}")
    form = {
        "key": "approve:A-1",
        "payload": '{"approved": true, "by": "ops"}',
        "idempotency_key": "form-1",
        "reason": "approved by phone",
        "csrf": token,
    }
    sent = http.post(f"/jobs/{waits.approval}/signal", data=form, follow_redirects=False)
    assert sent.status_code == 303
    assert sent.headers["location"].endswith(f"/jobs/{waits.approval}?done=signal_delivered")
    signal_id, payload, sent_by, job_id = one(
        dsn, "SELECT id, payload, sent_by, job_id FROM tenure.signals WHERE key = 'approve:A-1'"
    )
    assert (payload, sent_by, job_id) == ({"approved": True, "by": "ops"}, "dashboard:local", waits.approval)
    assert one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", waits.approval) == ("pending",)
    assert one(
        dsn,
        "SELECT event, worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1",
        waits.approval,
    ) == ("signalled", "dashboard:local", f"signal {signal_id} to approve:A-1: approved by phone")
    page = http.get(sent.headers["location"])
    assert "The signal woke this job" in page.text
    row = wait_row(page.text, "approve:A-1")
    assert "signalled" in row and f"signal {signal_id} from <code>dashboard:local</code>" in row
    assert "&#34;by&#34;: &#34;ops&#34;" in row


def test_a_signal_with_an_idempotency_key_already_used_says_so_and_writes_nothing(
    http: TestClient, dsn: str, waits: Waits
) -> None:
    """A second signal with the same key and idempotency key writes nothing and the page says so; a
    signal to a key nobody waits for is kept, and the page says that."""
    token = csrf_of(http, f"/jobs/{waits.approval}")
    form = {"key": "approve:A-9", "payload": "", "idempotency_key": "form-1", "reason": "x", "csrf": token}
    kept = http.post(f"/jobs/{waits.approval}/signal", data=form)
    assert kept.status_code == 200 and "the signal is kept for the next job that waits for it" in kept.text
    again = http.post(f"/jobs/{waits.approval}/signal", data={**form, "payload": '{"other": 1}'})
    assert again.status_code == 200
    assert "A signal with this idempotency key was sent to that key before: nothing was sent" in again.text
    assert one(
        dsn,
        "SELECT count(*), min(payload::text), min(sent_by) FROM tenure.signals WHERE key = %s",
        "approve:A-9",
    ) == (
        1,
        "null",
        "dashboard:local",
    )
    assert one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", waits.approval) == ("waiting",)


@pytest.mark.parametrize(
    ("field", "value", "status", "message"),
    [
        ("payload", '{"approved": ', 400, "the payload is not valid JSON"),
        ("payload", "[" * 50_000, 400, "nested too deeply"),
        ("payload", "NaN", 400, "must be JSON"),
        ("payload", json.dumps({"blob": "x" * 70_000}), 400, "over the limit of 65536"),
        ("payload", json.dumps({"blob": "é" * 40_000}), 413, "the form is too large"),
        ("key", "k" * 401, 400, "1 to 400 characters, got 401 characters"),
        ("key", "", 400, "1 to 400 characters, got 0 characters"),
        ("idempotency_key", "i" * 201, 400, "idempotency key must be a string of 1 to 200 characters"),
        ("reason", " ", 400, "give a reason"),
    ],
    ids=[
        "bad-json",
        "too-deep",
        "not-a-number",
        "payload-over-64k",
        "form-over-its-limit",
        "key-too-long",
        "no-key",
        "idempotency-key-too-long",
        "no-reason",
    ],
)
def test_a_bad_signal_is_refused_with_a_clear_message_and_writes_nothing(
    http: TestClient, dsn: str, waits: Waits, field: str, value: str, status: int, message: str
) -> None:
    """Each bad field of the signal form is answered with what is wrong, and nothing is written."""
    token = csrf_of(http, f"/jobs/{waits.approval}")
    form = {"key": "approve:A-1", "payload": "{}", "idempotency_key": "", "reason": "try", "csrf": token}
    page = http.post(f"/jobs/{waits.approval}/signal", data={**form, field: value})
    assert page.status_code == status and message in page.text, page.text[-600:]
    assert untouched(dsn, waits)


@pytest.mark.parametrize(
    "headers",
    [{"origin": "http://evil.example"}, {"sec-fetch-site": "cross-site"}, {"origin": "null"}, {}],
    ids=["origin", "fetch-site", "null-origin", "neither"],
)
def test_both_acts_are_refused_from_another_origin_even_with_the_csrf_token(
    dsn: str, waits: Waits, headers: dict[str, str]
) -> None:
    """A form from another site's page (or a POST saying neither where it comes from) can neither
    end the wait nor send a signal, though it carries the session's CSRF cookie and field."""
    with TestClient(create_app(dsn), base_url=LOCAL) as http:
        token = csrf_of(http, f"/jobs/{waits.approval}")
        ended = http.post(
            f"/jobs/{waits.approval}/end-wait", data={"reason": "forged", "csrf": token}, headers=headers
        )
        assert ended.status_code == 403 and "Nothing was changed" in ended.text
        signal = {"key": "approve:A-1", "payload": "{}", "reason": "forged", "csrf": token}
        sent = http.post(f"/jobs/{waits.approval}/signal", data=signal, headers=headers)
        assert sent.status_code == 403
    assert untouched(dsn, waits)


def test_read_only_shows_the_waits_but_no_act_and_refuses_both(dsn: str, waits: Waits) -> None:
    """A read-only dashboard shows what the job waits for without a form, and refuses both acts
    with 403 though the request is otherwise valid."""
    with dashboard_client(create_app(dsn, read_only=True)) as http:
        page = http.get(f"/jobs/{waits.approval}")
        assert page.status_code == 200 and "approve:A-1" in page.text and 'name="reason"' not in page.text
        token = http.cookies["tenure_csrf"]
        ended = http.post(f"/jobs/{waits.approval}/end-wait", data={"reason": "x", "csrf": token})
        assert ended.status_code == 403 and "read-only" in ended.text
        signal = {"key": "approve:A-1", "payload": "{}", "reason": "x", "csrf": token}
        sent = http.post(f"/jobs/{waits.approval}/signal", data=signal)
        assert sent.status_code == 403 and "read-only" in sent.text
    assert untouched(dsn, waits)


def test_with_a_token_both_acts_need_it_and_record_the_user(dsn: str, waits: Waits) -> None:
    """Behind a token, an act without it is a 401 that changes nothing; with it, the wait's end
    and the signal name the authenticated user."""
    bearer = {"authorization": "Bearer s3cret"}
    with dashboard_client(create_app(dsn, auth=token_auth("s3cret", user="ops"))) as http:
        page = http.get(f"/jobs/{waits.approval}", headers=bearer)
        found = CSRF.search(page.text)
        assert found
        form = {"reason": "approved by phone", "csrf": found.group(1)}
        assert http.post(f"/jobs/{waits.approval}/end-wait", data=form).status_code == 401
        assert untouched(dsn, waits)
        ended = http.post(f"/jobs/{waits.approval}/end-wait", data=form, headers=bearer)
        assert ended.status_code == 200
        signal = {**form, "key": "approve:later", "payload": "1"}
        assert http.post(f"/jobs/{waits.approval}/signal", data=signal, headers=bearer).status_code == 200
    assert one(dsn, "SELECT ended_by FROM tenure.job_waits WHERE job_id = %s", waits.approval) == (
        "dashboard:ops",
    )
    assert one(dsn, "SELECT sent_by FROM tenure.signals WHERE key = 'approve:later'") == ("dashboard:ops",)

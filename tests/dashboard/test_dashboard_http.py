"""The dashboard over HTTP against a real database: pages, filters, security and actions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import psycopg
import pytest
from _dashboard_jobs import Seeded, csrf_of, dashboard_client, fetch_one, seed
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app, token_auth

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed(dsn)


@pytest.fixture
def http(dsn: str, seeded: Seeded) -> Iterator[TestClient]:
    with dashboard_client(create_app(dsn)) as client:
        yield client


def csrf_of_login(http: TestClient) -> str:
    page = http.get("/login")
    found = CSRF.search(page.text)
    assert page.status_code == 200 and found, "no CSRF field on the login form"
    return found.group(1)


def listed_ids(html: str) -> set[int]:
    return {int(n) for n in re.findall(r'href="[^"]*/jobs/(\d+)"', html)}


def test_overview_shows_every_queue_with_counts_by_state_and_security_headers(
    http: TestClient, seeded: Seeded
) -> None:
    """The overview lists both queues with a count in every state and carries the strict headers."""
    page = http.get("/")
    assert page.status_code == 200
    for queue in ("mail", "billing"):
        assert f'data-queue="{queue}"' in page.text
    billing = page.text.split('data-queue="billing"')[1].split("</tr>")[0]
    assert re.search(r"state=dead\">1</a>", billing) and re.search(r"state=running\">1</a>", billing)
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "same-origin"
    assert http.get("/static/dashboard.css").headers["x-content-type-options"] == "nosniff"
    assert "1 succeeded" in page.text and "1 dead" in page.text  # finished in the last hour
    assert '<rect class="bar succeeded"' in page.text and '<rect class="bar dead"' in page.text
    live = http.get("/overview/live")
    assert live.status_code == 200 and "<html" not in live.text and 'data-queue="mail"' in live.text


def test_overview_shows_a_paused_queue_and_the_problems_check_would_raise(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """A paused queue reads as paused with a resume form, and a failing worker is named as a problem."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.queue_pauses (queue, actor, reason) VALUES ('mail', 'ops', 'deploy')"
        )
        conn.execute(
            "INSERT INTO tenure.workers (id, queues, concurrency, busy, failing) "
            "VALUES ('w-sick', ARRAY['mail'], 4, 0, '{\"database\": {\"failures\": 3}}')"
        )
    page = http.get("/")
    mail = page.text.split('data-queue="mail"')[1].split("</tr>")[0]
    assert "paused" in mail and 'value="resume"' in mail
    assert "1 workers report a failing service" in page.text
    assert "w-sick" in page.text


def test_jobs_list_filters_by_state_queue_and_payload_containment(http: TestClient, seeded: Seeded) -> None:
    """Each filter narrows the list to exactly the matching jobs."""
    assert listed_ids(http.get("/jobs", params={"state": "dead"}).text) == {seeded.dead}
    assert listed_ids(http.get("/jobs", params={"queue": "billing"}).text) == {seeded.running, seeded.dead}
    by_payload = http.get("/jobs", params={"payload": json.dumps({"customer_id": 7})})
    assert by_payload.status_code == 200
    assert listed_ids(by_payload.text) == {seeded.pending, seeded.running}
    both = http.get("/jobs", params={"payload": '{"customer_id": 7}', "queue": "billing"})
    assert listed_ids(both.text) == {seeded.running}
    assert listed_ids(http.get("/jobs", params={"error_code": "CARD_DECLINED"}).text) == {seeded.dead}


def test_jobs_list_pages_by_id_descending(http: TestClient, dsn: str, seeded: Seeded) -> None:
    """With more jobs than a page, the next link's `before` leads to the older ones, none twice."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task) SELECT 'bulk', 'bulk.t' FROM generate_series(1, 60)"
        )
    first = http.get("/jobs", params={"queue": "bulk"})
    ids = [int(n) for n in re.findall(r'href="[^"]*/jobs/(\d+)"', first.text)]
    assert len(ids) == 50 and ids == sorted(ids, reverse=True)
    link = re.search(r'class="next" href="[^"?]*\?([^"]+)"', first.text)
    assert link and "queue=bulk" in link.group(1)
    second = http.get("/jobs?" + link.group(1).replace("&amp;", "&"))
    more = [int(n) for n in re.findall(r'href="[^"]*/jobs/(\d+)"', second.text)]
    assert len(more) == 10 and max(more) < min(ids)
    assert 'class="next"' not in second.text


def test_sql_metacharacters_in_filters_match_nothing_and_harm_nothing(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """Quotes, semicolons and comments in every filter are plain values: no match, no error, no damage."""
    nasty = "mail'; DROP TABLE tenure.jobs; --"
    for name in ("queue", "task", "error_code", "ordering_key"):
        page = http.get("/jobs", params={name: nasty})
        assert page.status_code == 200 and listed_ids(page.text) == set()
        dead = http.get("/dead", params={name: nasty} if name != "ordering_key" else {"task": nasty})
        assert dead.status_code == 200 and '<strong class="matching">0</strong>' in dead.text
    page = http.get("/jobs", params={"payload": json.dumps({"k": "x') OR 1=1 --"})})
    assert page.status_code == 200 and listed_ids(page.text) == set()
    assert fetch_one(dsn, "SELECT count(*) FROM tenure.jobs")[0] == 7


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"customer_id": ', "is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"k": "x" * 5000}), "larger than 4096 bytes"),
    ],
    ids=["truncated", "not-an-object", "oversized"],
)
def test_a_malformed_or_oversized_payload_filter_is_a_clear_400(
    http: TestClient, payload: str, message: str
) -> None:
    """Bad filter JSON answers 400 with a message saying what is wrong, and lists no job."""
    page = http.get("/jobs", params={"payload": payload})
    assert page.status_code == 400
    assert message in page.text and listed_ids(page.text) == set()


def test_an_unknown_state_filter_is_a_400(http: TestClient) -> None:
    """A state that does not exist is refused with the list of states."""
    page = http.get("/jobs", params={"state": "exploded"})
    assert page.status_code == 400 and "choose one of" in page.text


def test_job_page_shows_history_and_masks_credentials(http: TestClient, seeded: Seeded) -> None:
    """The dead job's page shows its facts and its timeline in time order (row and audit events
    merged); a payload's credentials never reach the page."""
    dead = http.get(f"/jobs/{seeded.dead}")
    assert dead.status_code == 200
    assert "CARD_DECLINED" in dead.text and "lease expired" in dead.text and "worker-gone" in dead.text
    timeline = dead.text.split('<ol class="timeline">')[1].split("</ol>")[0]
    assert "enqueued" in timeline and "last claimed" in timeline and "attempt 2" in timeline
    times = re.findall(r"<time>([^<]+)</time>", timeline)
    assert len(times) == 5 and times == sorted(times)  # enqueued, claimed, expiry, death event, finished
    assert 'value="retry"' in dead.text and "Reprocess" in dead.text
    secret = http.get(f"/jobs/{seeded.secret}")
    assert "hunter2" not in secret.text and "sk-1" not in secret.text
    assert "&#34;user&#34;: &#34;ann&#34;" in secret.text or '"user": "ann"' in secret.text
    running = http.get(f"/jobs/{seeded.running}")
    assert "worker-a" in running.text and "Revoke" in running.text and "done" in running.text
    assert http.get("/jobs/999999").status_code == 404


def test_a_forged_post_without_the_csrf_token_is_refused(http: TestClient, dsn: str, seeded: Seeded) -> None:
    """A POST with no token, or with a wrong one, answers 403 and leaves the job dead."""
    csrf_of(http, f"/jobs/{seeded.dead}")  # the browser holds a CSRF cookie
    assert http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "forged"}).status_code == 403
    forged = http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "forged", "csrf": "guess"})
    assert forged.status_code == 403
    http.cookies.clear()  # a browser with no CSRF cookie at all, as on another site's page
    assert http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "x", "csrf": "x"}).status_code == 403
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "dead"


def test_reprocess_and_revoke_change_the_database_and_write_the_audit_log(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """Reprocessing the dead job makes it pending, revoking the running one cancels it; both histories
    name the dashboard actor and the reason."""
    token = csrf_of(http, f"/jobs/{seeded.dead}")
    done = http.post(
        f"/jobs/{seeded.dead}/retry", data={"reason": "card fixed", "csrf": token}, follow_redirects=False
    )
    assert done.status_code == 303
    assert http.get(done.headers["location"]).text.count("sent back to run") == 1
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "pending"
    assert fetch_one(
        dsn,
        "SELECT worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1",
        seeded.dead,
    ) == ("dashboard:local", "card fixed")
    revoked = http.post(f"/jobs/{seeded.running}/cancel", data={"reason": "runaway", "csrf": token})
    assert revoked.status_code == 200 and "was cancelled" in revoked.text
    assert (
        fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.running)[0] == "cancelled"
    )
    assert fetch_one(
        dsn, "SELECT event, worker FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC", seeded.running
    ) == ("revoke", "dashboard:local")


def test_pause_and_resume_a_queue_write_the_queue_audit_log(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """Pausing and resuming from the overview records both acts with the dashboard actor and reasons."""
    token = csrf_of(http, "/")
    assert http.post("/queues/mail/pause", data={"reason": "deploy", "csrf": token}).status_code == 200
    assert fetch_one(dsn, "SELECT actor, reason FROM tenure.queue_pauses WHERE queue = 'mail'") == (
        "dashboard:local",
        "deploy",
    )
    assert http.post("/queues/mail/resume", data={"reason": "deployed", "csrf": token}).status_code == 200
    with psycopg.connect(dsn) as conn:
        events = conn.execute("SELECT event, actor, reason FROM tenure.queue_events ORDER BY id").fetchall()
    assert events == [("pause", "dashboard:local", "deploy"), ("resume", "dashboard:local", "deployed")]


def test_an_action_needs_a_reason(http: TestClient, dsn: str, seeded: Seeded) -> None:
    """A blank reason is refused with 400 and changes nothing."""
    token = csrf_of(http, f"/jobs/{seeded.dead}")
    page = http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "  ", "csrf": token})
    assert page.status_code == 400 and "give a reason" in page.text
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "dead"


def test_an_action_on_a_job_that_changed_state_meanwhile_is_a_409(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """The page offered Reprocess for a dead job; someone else reprocessed it first: the second act
    is refused with 409 and a message naming the job's state, and the job is untouched by it."""
    token = csrf_of(http, f"/jobs/{seeded.dead}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE tenure.jobs SET state = 'succeeded', finished_at = now() WHERE id = %s",
            (seeded.dead,),
        )
    page = http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "late", "csrf": token})
    assert page.status_code == 409
    assert f"job {seeded.dead}" in page.text and "succeeded" in page.text
    again = http.post("/queues/billing/resume", data={"reason": "not paused", "csrf": token})
    assert again.status_code == 409
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "succeeded"


def test_read_only_hides_and_refuses_every_action(dsn: str, seeded: Seeded) -> None:
    """With read_only, no page shows an action form and a POST with a valid token answers 403."""
    with dashboard_client(create_app(dsn, read_only=True)) as http:
        for path in ("/", f"/jobs/{seeded.dead}", f"/jobs/{seeded.running}"):
            page = http.get(path)
            assert page.status_code == 200 and 'name="reason"' not in page.text
        http.get("/")
        token = http.cookies["tenure_csrf"]
        refused = http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "x", "csrf": token})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "dead"


def test_with_a_token_every_request_needs_it(dsn: str, seeded: Seeded) -> None:
    """Missing or wrong credentials answer 401, a login POST without its CSRF token 403; a bearer
    header or the login cookie lets the user in, and the actor in the audit log is the authenticated user."""
    with dashboard_client(create_app(dsn, auth=token_auth("s3cret", user="ops"))) as http:
        assert http.get("/").status_code == 401
        assert http.get("/jobs").status_code == 401
        assert http.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        login = csrf_of_login(http)
        assert http.post("/login", data={"token": "s3cret"}).status_code == 403  # no CSRF field
        assert http.post("/login", data={"token": "wrong", "csrf": login}).status_code == 401
        assert http.get("/").status_code == 401
        assert http.post("/login", data={"token": "s3cret", "csrf": login}).status_code == 200
        token = csrf_of(http, f"/jobs/{seeded.dead}")
        assert (
            http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "ok", "csrf": token}).status_code == 200
        )
    assert fetch_one(
        dsn, "SELECT worker FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1", seeded.dead
    ) == ("dashboard:ops",)


def test_mounted_under_a_prefix_in_a_host_app_its_links_and_actions_carry_the_prefix(
    dsn: str, seeded: Seeded
) -> None:
    """Mounted at /ops in another Starlette app (whose lifespan knows nothing of it), the pages
    render, their links and forms point under /ops, and an action works through the mount."""
    host = Starlette(routes=[Mount("/ops", app=create_app(dsn))])
    with dashboard_client(host) as http:
        page = http.get("/ops/")
        assert page.status_code == 200
        assert 'href="http://127.0.0.1/ops/static/dashboard.css"' in page.text
        assert 'action="http://127.0.0.1/ops/queues/mail/pause"' in page.text
        token = csrf_of(http, f"/ops/jobs/{seeded.dead}")
        done = http.post(
            f"/ops/jobs/{seeded.dead}/retry",
            data={"reason": "via mount", "csrf": token},
            follow_redirects=False,
        )
        assert done.status_code == 303 and done.headers["location"].startswith("http://127.0.0.1/ops/jobs/")
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "pending"


def test_an_unreachable_database_is_a_503_page_not_a_crash() -> None:
    """With nothing listening at the DSN, a page answers 503 naming the database (no password), and
    the app keeps answering."""
    app = create_app("postgresql://someone:hunter2@127.0.0.1:1/nowhere")
    with dashboard_client(app) as http:  # the lifespan's open fails too: the app still starts
        for _ in range(2):
            page = http.get("/")
            assert page.status_code == 503 and "Database unavailable" in page.text
            assert "127.0.0.1:1/nowhere" in page.text and "hunter2" not in page.text


def test_connections_killed_by_a_server_restart_cost_no_failed_page(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """After every dashboard connection is terminated (as a restart or failover would), the next
    pages render: the pool tests each connection as it lends it."""
    assert http.get("/").status_code == 200
    with psycopg.connect(dsn, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'tenure-dashboard%%'"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    for path in ("/", "/jobs", f"/jobs/{seeded.dead}", "/dead"):
        assert http.get(path).status_code == 200, path


def test_an_act_on_a_read_only_database_is_a_503_that_changes_nothing(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """With the database read-only (a standby, maintenance), reprocess answers 503 saying so, the
    job stays dead, and pages still render."""
    token = csrf_of(http, f"/jobs/{seeded.dead}")
    dbname = fetch_one(dsn, "SELECT current_database()")[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'tenure-dashboard%%'"
            " AND pid <> pg_backend_pid()"
        )
    try:
        page = http.post(f"/jobs/{seeded.dead}/retry", data={"reason": "card fixed", "csrf": token})
        assert page.status_code == 503 and "takes no writes now" in page.text
        assert http.get(f"/jobs/{seeded.dead}").status_code == 200
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f'ALTER DATABASE "{dbname}" RESET default_transaction_read_only')
    assert fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.dead)[0] == "dead"


def test_revoke_and_run_again_gives_a_running_job_a_new_token_and_a_second_try_is_refused(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """Requeue ends the running job's lease: it is pending under the next token, the attempt is not
    counted, the history says who and why; once it is no longer running the same act is a 409."""
    token = csrf_of(http, f"/jobs/{seeded.running}")
    assert 'value="requeue"' in http.get(f"/jobs/{seeded.running}").text
    done = http.post(f"/jobs/{seeded.running}/requeue", data={"reason": "worker is sick", "csrf": token})
    assert done.status_code == 200 and "pending again" in done.text
    assert fetch_one(
        dsn,
        "SELECT state::text, lease_token, attempt_count FROM tenure.jobs WHERE id = %s",
        seeded.running,
    ) == ("pending", 2, 0)
    assert fetch_one(
        dsn,
        "SELECT event, to_state::text, worker, error FROM tenure.job_events "
        "WHERE job_id = %s ORDER BY id DESC",
        seeded.running,
    ) == ("revoke", "pending", "dashboard:local", "worker is sick")
    again = http.post(f"/jobs/{seeded.running}/requeue", data={"reason": "again", "csrf": token})
    assert again.status_code == 409 and "nothing" in again.text.lower()


def test_a_schema_behind_this_version_gets_a_page_saying_what_to_run_and_then_the_dashboard(
    empty_dsn: str,
) -> None:
    """On a schema an upgrade has not reached yet the dashboard answers 503 naming `migrate`,
    not a server error, and serves its pages once the upgrade ran."""
    import asyncio

    import psycopg
    from starlette.testclient import TestClient

    from tenure.db.migrate import WORKER_SCHEMA_FLOOR, migrate
    from tenure.ops.dashboard import create_app

    async def upgrade(up_to: int | None) -> None:
        async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
            await migrate(conn, "tenure", up_to=up_to)

    asyncio.run(upgrade(WORKER_SCHEMA_FLOOR))
    with TestClient(create_app(empty_dsn, schema="tenure"), base_url="http://127.0.0.1") as browser:
        behind = browser.get("/")
        assert behind.status_code == 503 and "migrate" in behind.text
        asyncio.run(upgrade(None))
        assert browser.get("/").status_code == 200

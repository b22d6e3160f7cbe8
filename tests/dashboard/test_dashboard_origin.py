"""The dashboard answers only its own names and takes acts only from its own pages: DNS
rebinding and cross-site forms are refused before they read or change anything."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from _dashboard_jobs import LOCAL, Seeded, csrf_of, fetch_one, seed
from starlette.testclient import TestClient

from tenure.ops.dashboard import create_app, is_loopback_host, token_auth

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
EVIL = "evil.example"


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed(dsn)


@pytest.fixture
def http(dsn: str, seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(dsn), base_url=LOCAL) as client:
        yield client


def untouched(dsn: str, seeded: Seeded) -> bool:
    """The pending job is still pending with no history, and no queue was paused."""
    state = fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.pending)[0]
    events = fetch_one(dsn, "SELECT count(*) FROM tenure.job_events WHERE job_id = %s", seeded.pending)[0]
    pauses = fetch_one(dsn, "SELECT count(*) FROM tenure.queue_pauses")[0]
    queue_events = fetch_one(dsn, "SELECT count(*) FROM tenure.queue_events")[0]
    return (state, events, pauses, queue_events) == ("pending", 0, 0, 0)


def test_a_rebound_host_name_can_neither_read_a_page_nor_act(
    http: TestClient, dsn: str, seeded: Seeded
) -> None:
    """With no token, a request naming another host (a page that pointed its name at 127.0.0.1)
    gets 400 with the reason: no payload is read, the job stays pending, the queue unpaused."""
    token = csrf_of(http, f"/jobs/{seeded.pending}")  # as if the page had got hold of the token
    for host in (EVIL, f"{EVIL}:8787"):
        page = http.get(f"/jobs/{seeded.pending}", headers={"host": host})
        assert page.status_code == 400
        assert "customer_id" not in page.text and "loopback" in page.text
        assert "Traceback" not in page.text and page.headers["content-type"].startswith("text/plain")
        cancel = http.post(
            f"/jobs/{seeded.pending}/cancel",
            data={"reason": "rebound", "csrf": token},
            headers={"host": host},
        )
        assert cancel.status_code == 400
        pause = http.post(
            "/queues/mail/pause", data={"reason": "rebound", "csrf": token}, headers={"host": host}
        )
        assert pause.status_code == 400
    assert untouched(dsn, seeded)


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": f"http://{EVIL}"},
        {"origin": f"http://{EVIL}", "sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site", "origin": "http://127.0.0.1"},
        {"origin": "null"},
        {"origin": "http://127.0.0.1:9999"},
        {},
    ],
    ids=[
        "origin",
        "origin-and-fetch-site",
        "fetch-site",
        "same-site",
        "null-origin",
        "other-port",
        "neither",
    ],
)
def test_a_post_from_another_origin_is_refused_even_with_the_csrf_token(
    http: TestClient, dsn: str, seeded: Seeded, headers: dict[str, str]
) -> None:
    """A form sent to the right host from another site's page, or a POST that says neither where
    it comes from, answers 403 and changes nothing, though it carries the session's CSRF token and
    cookie (a page on another port of the machine can set that pair)."""
    token = csrf_of(http, f"/jobs/{seeded.pending}")
    cancel = http.post(
        f"/jobs/{seeded.pending}/cancel", data={"reason": "forged", "csrf": token}, headers=headers
    )
    assert cancel.status_code == 403
    assert any(why in cancel.text for why in ("another site", "no origin", "says neither"))
    pause = http.post("/queues/mail/pause", data={"reason": "forged", "csrf": token}, headers=headers)
    assert pause.status_code == 403
    assert untouched(dsn, seeded)


def test_a_post_from_the_dashboards_own_page_is_taken(http: TestClient, dsn: str, seeded: Seeded) -> None:
    """What a browser sends from the dashboard's own form (its Origin, Sec-Fetch-Site same-origin)
    goes through, as does a program's POST that sends the dashboard's own Origin."""
    token = csrf_of(http, "/")
    own = {"origin": LOCAL, "sec-fetch-site": "same-origin"}
    paused = http.post("/queues/mail/pause", data={"reason": "deploy", "csrf": token}, headers=own)
    assert paused.status_code == 200 and fetch_one(dsn, "SELECT count(*) FROM tenure.queue_pauses")[0] == 1
    resumed = http.post(
        "/queues/mail/resume", data={"reason": "deployed", "csrf": token}, headers={"origin": LOCAL}
    )
    assert resumed.status_code == 200 and fetch_one(dsn, "SELECT count(*) FROM tenure.queue_pauses")[0] == 0
    cancelled = http.post(
        f"/jobs/{seeded.pending}/cancel", data={"reason": "script", "csrf": token}, headers={"origin": LOCAL}
    )
    assert cancelled.status_code == 200
    assert (
        fetch_one(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", seeded.pending)[0] == "cancelled"
    )


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:8787", "127.0.0.1:8787", "127.0.0.2", "127.9.8.7:1", "[::1]", "[::1]:8787"],
)
def test_every_loopback_name_is_served(http: TestClient, host: str) -> None:
    """localhost, any 127.x address and [::1], with or without a port, reach the pages."""
    assert http.get("/", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST:8787", True),
        ("127.0.0.1", True),
        ("127.255.0.1:80", True),
        ("[::1]", True),
        ("[::1]:8787", True),
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example:8787", False),
        ("127.1", False),
        ("::1", False),
        ("[::1", False),
        ("[::1]x", False),
        ("127.0.0.1:", False),
        ("127.0.0.1:http", False),
        ("10.0.0.1", False),
        ("[::2]", False),
        ("", False),
    ],
)
def test_loopback_host_names(host: str, loopback: bool) -> None:
    """Only a well-formed loopback name counts as loopback; look-alikes and malformed hosts do not."""
    assert is_loopback_host(host) is loopback


def test_with_a_token_any_host_is_served_but_acts_still_need_the_same_origin(
    dsn: str, seeded: Seeded
) -> None:
    """Behind a token the dashboard answers any name (a rebound page has no token), and a form from
    another site is still refused."""
    bearer = {"authorization": "Bearer s3cret"}
    with TestClient(create_app(dsn, auth=token_auth("s3cret")), base_url="http://ops.example") as http:
        assert http.get("/", headers=bearer).status_code == 200
        assert http.get("/", headers={"host": EVIL}).status_code == 401
        token = csrf_of_with(http, bearer)
        refused = http.post(
            "/queues/mail/pause",
            data={"reason": "forged", "csrf": token},
            headers={**bearer, "origin": f"http://{EVIL}"},
        )
        assert refused.status_code == 403
        assert untouched(dsn, seeded)
        taken = http.post(
            "/queues/mail/pause",
            data={"reason": "deploy", "csrf": token},
            headers={**bearer, "origin": "http://ops.example"},
        )
        assert taken.status_code == 200
    assert fetch_one(dsn, "SELECT actor FROM tenure.queue_pauses WHERE queue = 'mail'") == (
        "dashboard:token",
    )


def csrf_of_with(http: TestClient, headers: dict[str, str]) -> str:
    found = CSRF.search(http.get("/", headers=headers).text)
    assert found
    return found.group(1)


def test_a_host_app_names_the_hosts_it_serves_the_dashboard_under(dsn: str, seeded: Seeded) -> None:
    """create_app(hosts=...) adds names to the loopback ones, and only those."""
    with TestClient(create_app(dsn, hosts=["ops.internal"]), base_url="http://ops.internal:8000") as http:
        assert http.get("/").status_code == 200
        assert http.get("/", headers={"host": "localhost"}).status_code == 200
        assert http.get("/", headers={"host": EVIL}).status_code == 400

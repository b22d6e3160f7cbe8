"""Jobs in every state for the dashboard's tests, put in place with plain SQL, and the client the
tests reach the dashboard with."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient
from starlette.types import ASGIApp

#: Where the tests reach a dashboard without a token: by a loopback name, as the browser on the
#: operator's machine does (it answers no other name).
LOCAL = "http://127.0.0.1"


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def fetch_one(dsn: str, sql: str, *params: Any) -> tuple[Any, ...]:
    """The one row `sql` gives, read on a connection of its own."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row


def csrf_of(http: TestClient, path: str = "/") -> str:
    """The CSRF token of the form on the page at `path`."""
    page = http.get(path)
    assert page.status_code == 200
    found = CSRF.search(page.text)
    assert found, f"no CSRF field on {path}"
    return found.group(1)


def dashboard_client(app: ASGIApp, base_url: str = LOCAL) -> TestClient:
    """A client that sends what a browser sends from the dashboard's own pages: its Origin, on
    which the dashboard takes acts (tests/dashboard/test_dashboard_origin.py tests the others)."""
    return TestClient(app, base_url=base_url, headers={"origin": base_url})


@dataclass(frozen=True)
class Seeded:
    pending: int
    scheduled: int
    running: int
    dead: int
    succeeded: int
    cancelled: int
    secret: int


def _insert(conn: psycopg.Connection[Any], queue: str, task: str, payload: dict[str, Any]) -> int:
    row = conn.execute(
        "INSERT INTO tenure.jobs (queue, task, payload) VALUES (%s, %s, %s) RETURNING id",
        (queue, task, Jsonb(payload)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def seed(dsn: str) -> Seeded:
    """One job per state in queues `mail` and `billing`, with distinct payloads, and a history
    (a lease expiry, then death) on the dead one."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pending = _insert(conn, "mail", "mail.send", {"customer_id": 7, "kind": "welcome"})
        scheduled = _insert(conn, "mail", "mail.send", {"customer_id": 8})
        conn.execute(
            "UPDATE tenure.jobs SET state = 'scheduled', available_at = now() + interval '1 hour' "
            "WHERE id = %s",
            (scheduled,),
        )
        running = _insert(conn, "billing", "billing.charge", {"customer_id": 7, "amount": 12})
        conn.execute(
            "UPDATE tenure.jobs SET state = 'running', attempt_count = 1, lease_token = 1, "
            "lease_owner = 'worker-a', attempted_at = now(), lease_expires_at = now() + interval '1 hour', "
            "lease_deadline = now() + interval '2 hours', progress = '{\"done\": 3}' WHERE id = %s",
            (running,),
        )
        dead = _insert(conn, "billing", "billing.charge", {"customer_id": 9, "amount": 5})
        conn.execute(
            "UPDATE tenure.jobs SET state = 'dead', attempt_count = 2, max_attempts = 2, lease_token = 2, "
            "attempted_at = now(), finished_at = now(), last_error_code = 'CARD_DECLINED', "
            "last_error = 'the card was declined' WHERE id = %s",
            (dead,),
        )
        conn.execute(
            "INSERT INTO tenure.job_events (job_id, event, from_state, to_state, token, worker, error_code, "
            "error) VALUES (%s, 'lease_expired', 'running', 'pending', 1, 'worker-gone', NULL, NULL), "
            "(%s, 'dead', 'running', 'dead', 2, 'worker-a', 'CARD_DECLINED', 'the card was declined')",
            (dead, dead),
        )
        succeeded = _insert(conn, "mail", "mail.send", {"customer_id": 10})
        conn.execute(
            "UPDATE tenure.jobs SET state = 'succeeded', attempt_count = 1, lease_token = 1, "
            "attempted_at = now(), finished_at = now(), result = '{\"sent\": true}' WHERE id = %s",
            (succeeded,),
        )
        cancelled = _insert(conn, "mail", "mail.send", {"customer_id": 11})
        conn.execute(
            "UPDATE tenure.jobs SET state = 'cancelled', finished_at = now(), last_error_code = 'CANCELLED' "
            "WHERE id = %s",
            (cancelled,),
        )
        secret = _insert(
            conn, "mail", "mail.login", {"user": "ann", "password": "hunter2", "nested": {"api_key": "sk-1"}}
        )
    return Seeded(pending, scheduled, running, dead, succeeded, cancelled, secret)


@dataclass(frozen=True)
class Attention:
    blocked_head: int
    waiting: tuple[int, int]
    uncertain_job: int
    uncertain_effect: int
    schedule: str


def seed_attention(dsn: str) -> Attention:
    """What needs an operator: an ordering key blocked by a dead job with two jobs behind it, a
    dead job with an uncertain effect, a schedule, a limited queue and a registered worker."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        head = _insert(conn, "ledger", "ledger.post", {"account": "acct-1", "seq": 1})
        behind = tuple(
            _insert(conn, "ledger", "ledger.post", {"account": "acct-1", "seq": n}) for n in (2, 3)
        )
        conn.execute("UPDATE tenure.jobs SET ordering_key = 'acct-1' WHERE id = ANY(%s)", ([head, *behind],))
        conn.execute(
            "UPDATE tenure.jobs SET state = 'dead', attempt_count = 1, max_attempts = 1, lease_token = 1, "
            "attempted_at = now(), finished_at = now(), last_error_code = 'LEDGER_CLOSED' WHERE id = %s",
            (head,),
        )
        charged = _insert(conn, "payments", "payments.charge", {"order": 42})
        conn.execute(
            "UPDATE tenure.jobs SET state = 'dead', attempt_count = 3, max_attempts = 3, lease_token = 3, "
            "attempted_at = now(), finished_at = now(), last_error_code = 'TIMEOUT' WHERE id = %s",
            (charged,),
        )
        row = conn.execute(
            "INSERT INTO tenure.job_effects (job_id, name, state, token) VALUES (%s, 'charge-card', "
            "'uncertain', 3) RETURNING id",
            (charged,),
        ).fetchone()
        assert row is not None
        conn.execute(
            "INSERT INTO tenure.schedules (name, task, queue, cron, timezone, last_slot) "
            "VALUES ('nightly-report', 'reports.nightly', 'reports', '0 3 * * *', 'UTC', now())"
        )
        conn.execute(
            "INSERT INTO tenure.queue_limits (queue, max_running, declared_by) VALUES ('payments', 2, 'w-1')"
        )
        conn.execute(
            "INSERT INTO tenure.workers (id, queues, concurrency, busy) "
            "VALUES ('w-1', ARRAY['payments', 'ledger'], 8, 3)"
        )
    return Attention(head, (behind[0], behind[1]), charged, int(row[0]), "nightly-report")


@dataclass(frozen=True)
class Waits:
    approval: int
    """Waits for a signal to `approve:A-1`, for 3 days."""
    sleeping: int
    """Its wait for `approve:A-2` was signalled (a payload with a credential in it); it sleeps now."""
    timed_out: int
    """Its wait for `approve:A-3` timed out, and it succeeded."""


def seed_waits(dsn: str) -> Waits:
    """Jobs of queue `shop` that waited, each run through tenure.testing's Inline (the worker's own
    claim, wait and completion statements, without a worker): one waiting for a signal, one whose
    signal came and that sleeps now, one whose wait timed out."""
    import asyncio
    from datetime import timedelta

    from tenure import JobContext, Tenure
    from tenure.testing import Inline

    async def run() -> Waits:
        app = Tenure(dsn)

        @app.task(name="shop.approve", queue="shop")
        async def approve(ctx: JobContext, order: str) -> dict[str, Any]:
            answer = await ctx.wait_for(f"approve:{order}", timeout=timedelta(days=3))
            if answer.signalled:
                await ctx.sleep(timedelta(hours=1))
            return {"outcome": answer.outcome}

        async with Inline(app) as t:
            timed_out = await t.perform(approve, order="A-3")
            await t.pass_time(timedelta(days=4))
            assert (await t.run_job(timed_out.job.id)).state == "succeeded"
            approval = await t.perform(approve, order="A-1")
            sleeping = await t.perform(approve, order="A-2")
            await app.signal("approve:A-2", {"approved": True, "by": "ann", "api_key": "sk-9"})
            assert (await t.run_job(sleeping.job.id)).state == "waiting"
            assert approval.state == "waiting"
        return Waits(approval.job.id, sleeping.job.id, timed_out.job.id)

    return asyncio.run(run())

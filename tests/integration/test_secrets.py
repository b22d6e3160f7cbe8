"""Secrets stay out of payloads: references are resolved at run time by the app's resolver, the
resolved value reaches the handler only, Tenure's own writes and logs never carry it, and enqueue
warns about or refuses credential-looking payload keys."""

from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any

import pytest
from psycopg import AsyncConnection

import tenure
from tenure import CredentialInPayloadWarning, JobContext, SecretValue, WorkerOptions
from tenure.model.errors import ConfigurationError, ValidationError

VALUE = "sk_live_51HxQ-very-secret"


async def settle(app: tenure.Tenure, db: AsyncConnection[Any], job_id: int) -> tuple[str, str | None]:
    worker = app.worker(WorkerOptions(poll_interval=0.02))
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            row = await (
                await db.execute(
                    "SELECT state::text, last_error_code FROM tenure.jobs WHERE id = %s", (job_id,)
                )
            ).fetchone()
            assert row is not None
            if row[0] in ("succeeded", "dead"):
                return row[0], row[1]
            await asyncio.sleep(0.02)
        raise AssertionError("the job did not settle")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


async def stored_anywhere(db: AsyncConnection[Any], text: str) -> int:
    """How many rows of Tenure's tables contain `text` anywhere."""
    total = 0
    for table in ("jobs", "job_events", "job_effects"):
        row = await (
            await db.execute(f"SELECT count(*) FROM tenure.{table} t WHERE t::text LIKE %s", (f"%{text}%",))
        ).fetchone()
        assert row is not None
        total += row[0]
    return total


async def test_the_handler_gets_the_resolved_value_and_the_database_only_the_reference(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The handler receives a SecretValue that prints as ***; the stored payload keeps the reference."""
    app = tenure.Tenure(dsn)
    seen: list[Any] = []

    @app.secret_resolver
    async def resolver(name: str) -> str:
        return {"stripe/key": VALUE}[name]

    @app.task(name="s.pay")
    async def pay(ctx: JobContext, api_key: Any, nested: dict[str, Any]) -> None:
        seen.extend([api_key, nested["token"]])

    job = await app.enqueue(
        "s.pay", {"api_key": tenure.secret("stripe/key"), "nested": {"token": tenure.secret("stripe/key")}}
    )
    assert await settle(app, db, job.id) == ("succeeded", None)
    await app.close()
    assert all(isinstance(v, SecretValue) and v.reveal() == VALUE for v in seen)
    assert VALUE not in repr(seen) and "***" in repr(seen)
    assert await stored_anywhere(db, VALUE) == 0
    payload = await (await db.execute("SELECT payload FROM tenure.jobs WHERE id = %s", (job.id,))).fetchone()
    assert payload == (
        {"api_key": {"$secret": "stripe/key"}, "nested": {"token": {"$secret": "stripe/key"}}},
    )


async def test_a_secret_in_the_handlers_error_is_redacted_from_last_error_events_and_logs(
    dsn: str, db: AsyncConnection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that raises with the resolved value in its message: last_error, the audit log and
    Tenure's log lines carry *** instead."""
    app = tenure.Tenure(dsn)
    app.secret_resolver(lambda name: VALUE)

    @app.task(name="s.leaky", max_attempts=2)
    def leaky(ctx: JobContext, key: Any) -> None:
        raise RuntimeError(f"the API refused key {key.reveal()} (attempt {ctx.attempt})")

    caplog.set_level(logging.DEBUG)
    job = await app.enqueue("s.leaky", {"key": tenure.secret("k")})
    assert await settle(app, db, job.id) == ("dead", "RuntimeError")
    await app.close()
    assert await stored_anywhere(db, VALUE) == 0
    row = await (await db.execute("SELECT last_error FROM tenure.jobs WHERE id = %s", (job.id,))).fetchone()
    assert row is not None and "the API refused key *** (attempt 2)" in row[0]
    assert all(VALUE not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("resolver", "needle"),
    [
        (None, "no secret resolver is registered"),
        (
            lambda name: (_ for _ in ()).throw(KeyError(f"vault says {VALUE}")),
            "could not be resolved (KeyError)",
        ),
        (lambda name: 42, "must return the secret as a str"),
    ],
)
async def test_a_secret_that_cannot_be_resolved_fails_the_job_permanently_without_the_value(
    dsn: str, db: AsyncConnection[Any], resolver: Any, needle: str
) -> None:
    """No resolver, a failing resolver or a non-str answer: dead with SECRET_UNRESOLVED, no value stored."""
    app = tenure.Tenure(dsn)
    if resolver is not None:
        app.secret_resolver(resolver)
    ran: list[int] = []

    @app.task(name="s.unresolved")
    def unresolved(ctx: JobContext, key: Any) -> None:
        ran.append(1)

    job = await app.enqueue("s.unresolved", {"key": tenure.secret("missing")})
    assert await settle(app, db, job.id) == ("dead", "SECRET_UNRESOLVED")
    await app.close()
    assert ran == []
    row = await (await db.execute("SELECT last_error FROM tenure.jobs WHERE id = %s", (job.id,))).fetchone()
    assert row is not None and needle in row[0] and "'missing'" in row[0]
    assert await stored_anywhere(db, VALUE) == 0


async def test_credential_looking_keys_warn_by_default_and_refuse_when_configured(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Default: a warning naming the key; refuse: ValidationError and nothing written; references and
    allow pass silently."""
    warn_app = tenure.Tenure(dsn)
    with pytest.warns(CredentialInPayloadWarning, match=r"payload\.auth\.api_key"):
        await warn_app.enqueue("t", {"auth": {"api_key": VALUE}}, queue="default")
    await warn_app.close()

    refuse_app = tenure.Tenure(dsn, credential_policy="refuse")
    with pytest.raises(ValidationError, match=r"payload\.password.*tenure\.secret"):
        await refuse_app.enqueue("t", {"password": "hunter2", "n": 1}, queue="default")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await refuse_app.enqueue(
            "t", {"password": tenure.secret("db/password"), "token_count": 3}, queue="default"
        )
    await refuse_app.close()

    allow_app = tenure.Tenure(dsn, credential_policy="allow")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await allow_app.enqueue("t", {"secret": "not really"}, queue="default")
    await allow_app.close()

    row = await (await db.execute("SELECT count(*) FROM tenure.jobs WHERE payload ? 'password'")).fetchone()
    assert row == (1,)  # only the reference was written
    with pytest.raises(ConfigurationError, match="'allow', 'warn', 'refuse'"):
        tenure.Tenure(dsn, credential_policy="sometimes")

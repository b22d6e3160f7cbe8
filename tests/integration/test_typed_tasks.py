"""The typed task API: `task.enqueue(...)` with the handler's own arguments, checked against its
signature and annotations before anything is written, in the caller's transaction when asked."""

from __future__ import annotations

from typing import Any, Literal

import psycopg
import pytest

import tenure
from tenure.model.errors import ConfigurationError, ValidationError


def make_app(dsn: str) -> tuple[tenure.Tenure, Any, Any]:
    app = tenure.Tenure(dsn)

    @app.task(queue="emails")
    async def send_receipt(
        ctx: tenure.JobContext, order_id: int, email: str, amount: float = 0.0, tags: list[str] | None = None
    ) -> None:
        """A typed async handler."""

    @app.task(queue="files")
    def compress(ctx: tenure.JobContext, folder: str, level: Literal["fast", "best"] = "fast") -> None:
        """A typed plain-function handler."""

    return app, send_receipt, compress


def rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task, queue, state::text, payload FROM tenure.jobs ORDER BY id"
        ).fetchall()


async def test_enqueue_takes_the_handlers_arguments_by_name_or_position(dsn: str) -> None:
    """Keyword and positional arguments land in the payload under the handler's parameter names;
    defaults not given are not stored (the handler applies them)."""
    app, send_receipt, _ = make_app(dsn)
    try:
        job = await send_receipt.enqueue(order_id=7, email="ann@example.com")
        await send_receipt.enqueue(8, "bob@example.com", 9.5)
        assert job.id > 0
    finally:
        await app.close()
    assert [r[3] for r in rows(dsn)] == [
        {"order_id": 7, "email": "ann@example.com"},
        {"order_id": 8, "email": "bob@example.com", "amount": 9.5},
    ]


def test_enqueue_sync_joins_the_callers_transaction_and_rolls_back_with_it(dsn: str) -> None:
    """with_options(conn=...) enqueues inside the caller's transaction: rolled back, no job; committed,
    the job, with the options applied (a delay makes it scheduled)."""
    app, _, compress = make_app(dsn)
    try:
        with psycopg.connect(dsn) as conn:
            compress.with_options(conn=conn).enqueue_sync(folder="/logs")
            conn.rollback()
        assert rows(dsn) == []
        with psycopg.connect(dsn) as conn:
            compress.with_options(conn=conn, delay=3600, priority=5).enqueue_sync("/logs", level="best")
            conn.commit()
        compress.enqueue_sync(folder="/tmp")
    finally:
        app.close_sync()
    assert [r[1:] for r in rows(dsn)] == [
        ("files", "scheduled", {"folder": "/logs", "level": "best"}),
        ("files", "pending", {"folder": "/tmp"}),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"order_id": "7", "email": "a@b.c"}, "order_id is annotated int, but the value given is a string"),
        ({"order_id": True, "email": "a@b.c"}, "order_id is annotated int, but the value given is a boolean"),
        ({"order_id": 7, "email": None}, "email is annotated str, but the value given is null"),
        ({"order_id": 7, "email": "a", "tags": ["x", 3]}, "tags is annotated list[str] | None"),
        ({"order_id": 7}, "missing a required argument: 'email'"),
        ({"order_id": 7, "email": "a", "colour": "red"}, "unexpected keyword argument 'colour'"),
    ],
    ids=["str-for-int", "bool-for-int", "null-for-str", "bad-list-item", "missing", "unknown"],
)
async def test_arguments_the_handler_rules_out_are_refused_before_writing(
    dsn: str, kwargs: dict[str, Any], message: str
) -> None:
    """A wrong type, a missing or an unknown argument raises ValidationError naming it, through the
    typed call and through app.enqueue alike, and writes nothing."""
    app, send_receipt, _ = make_app(dsn)
    try:
        with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("|", r"\|")):
            await send_receipt.enqueue(**kwargs)
        with pytest.raises(ValidationError):
            await app.enqueue(send_receipt, kwargs)
    finally:
        await app.close()
    assert rows(dsn) == []


async def test_what_json_cannot_judge_passes_and_numbers_widen(dsn: str) -> None:
    """An int for a float, None for an Optional, a Literal's value, and annotations JSON cannot
    judge (a forward reference) are accepted."""
    app, send_receipt, compress = make_app(dsn)

    @app.task(queue="misc")
    def later(ctx: tenure.JobContext, when: NotImportedAtRuntime) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Annotated with a name only a type checker would know."""

    try:
        await send_receipt.enqueue(order_id=1, email="a", amount=3, tags=None)
        await compress.enqueue(folder="/x", level="best")
        with pytest.raises(ValidationError, match="level is annotated Literal"):
            await compress.enqueue(folder="/x", level="medium")  # type: ignore[arg-type]
        await later.enqueue(when="2027-01-01")
    finally:
        await app.close()
    assert len(rows(dsn)) == 3


async def test_bad_options_and_a_mismatched_connection_are_refused(dsn: str) -> None:
    """An unknown enqueue option, or a synchronous connection given to the async enqueue, is a
    ConfigurationError naming the fix."""
    app, send_receipt, _ = make_app(dsn)
    try:
        with pytest.raises(ConfigurationError, match="unknown enqueue option"):
            send_receipt.with_options(colour="red")
        with psycopg.connect(dsn) as conn, pytest.raises(ConfigurationError, match="use enqueue_sync"):
            await send_receipt.with_options(conn=conn).enqueue(order_id=1, email="a")
    finally:
        await app.close()
    assert rows(dsn) == []

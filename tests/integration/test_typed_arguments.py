"""Typed arguments through a real worker: datetimes, UUIDs, Decimals, dataclasses and pydantic
models enqueued as themselves (or as their JSON form) reach the handler as their types, a value
that fits neither is refused at enqueue with nothing written, and a `-> Decimal` result comes
back from app.result as a Decimal, through a workflow step's input too."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pydantic
import pytest
from _inprocess import running

import tenure
from tenure import JobContext, Tenure, chain


@dataclasses.dataclass(frozen=True)
class Refund:
    order: uuid.UUID
    amount: Decimal


class Customer(pydantic.BaseModel):
    name: str
    since: date


def _app(dsn: str) -> tuple[Tenure, list[dict[str, Any]]]:
    app = Tenure(dsn)
    seen: list[dict[str, Any]] = []

    @app.task(name="typed.refund", queue="typed")
    async def refund(
        ctx: JobContext, when: datetime, refund: Refund, customer: Customer, request: uuid.UUID
    ) -> Decimal:
        seen.append({"when": when, "refund": refund, "customer": customer, "request": request})
        return refund.amount * 2

    @app.task(name="typed.total", queue="typed")
    def total(ctx: JobContext, amount: Decimal) -> Decimal:
        seen.append({"amount": amount})
        return amount + Decimal("0.01")

    return app, seen


WHEN = datetime(2025, 1, 31, 9, 30, tzinfo=UTC)
REFUND = Refund(uuid.UUID(int=42), Decimal("19.99"))
CUSTOMER = Customer(name="Ann", since=date(2020, 2, 29))
REQUEST = uuid.UUID(int=7)


async def test_typed_arguments_reach_the_handler_as_their_types_and_the_result_as_decimal(dsn: str) -> None:
    """Enqueued as Python values, and again as their JSON forms (an ISO string, dicts, strings),
    the handler receives a datetime, a Refund, a Customer and a UUID both times; the payload is
    stored as JSON, and app.result gives the handler's Decimal back with every digit."""
    app, seen = _app(dsn)
    refund = app.registry.get("typed.refund")
    assert refund is not None
    typed_job = await app.enqueue(
        refund, {"when": WHEN, "refund": REFUND, "customer": CUSTOMER, "request": REQUEST}
    )
    as_json = {
        "when": "2025-01-31T09:30:00+00:00",
        "refund": {"order": str(REFUND.order), "amount": "19.99"},
        "customer": {"name": "Ann", "since": "2020-02-29"},
        "request": str(REQUEST),
    }
    json_job = await app.enqueue("typed.refund", as_json, result_wanted=True)
    async with running(app, queues=["typed"]):
        first = await app.result(typed_job.id, timeout=15, poll=0.05)
        second = await app.result(json_job.id, timeout=15, poll=0.05)
    assert first == second == Decimal("39.98") and isinstance(first, Decimal)
    expected = {"when": WHEN, "refund": REFUND, "customer": CUSTOMER, "request": REQUEST}
    assert seen == [expected, expected]
    with psycopg.connect(dsn) as conn:
        query = "SELECT payload, result FROM tenure.jobs WHERE id = %s"
        stored = conn.execute(query, (typed_job.id,)).fetchone()
    assert stored == (as_json, "39.98")


async def test_a_value_that_fits_no_annotation_is_refused_at_enqueue_and_nothing_is_written(dsn: str) -> None:
    """An integer for a datetime, a float for a Decimal field, a pydantic field that does not
    parse: each refused with the argument named and the fix, and no job stored."""
    app, _ = _app(dsn)
    refund = app.registry.get("typed.refund")
    assert refund is not None
    good = {"when": WHEN, "refund": REFUND, "customer": CUSTOMER, "request": REQUEST}
    refusals = [
        ({"when": 1738315800}, "when is annotated datetime, but the value given is an integer"),
        ({"refund": {"order": str(REFUND.order), "amount": 19.99}}, "refund.amount is annotated Decimal"),
        ({"customer": {"name": "Ann", "since": "soon"}}, "customer does not fit Customer: since:"),
        ({"request": "not-a-uuid"}, "request is annotated UUID, but the value given is a string"),
    ]
    try:
        for change, said in refusals:
            with pytest.raises(tenure.ValidationError) as exc:
                await app.enqueue(refund, {**good, **change})
            assert "payload does not fit task 'typed.refund'" in str(exc.value) and said in str(exc.value)
    finally:
        await app.close()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM tenure.jobs").fetchone() == (0,)


async def test_a_workflow_step_receives_the_previous_decimal_result_as_a_decimal(dsn: str) -> None:
    """A chain of two `-> Decimal` steps: the second's `amount: Decimal` input arrives as a
    Decimal, and the last result reads back as one."""
    app, seen = _app(dsn)
    total = app.registry.get("typed.total")
    assert total is not None
    run = await app.enqueue_workflow(chain(total.bind(amount=Decimal("1.10")), total.bind(), input="amount"))
    async with running(app, queues=["typed"]):
        last = await app.result(run.jobs["typed.total-2"], timeout=15, poll=0.05)
    assert last == Decimal("1.12") and isinstance(last, Decimal)
    assert seen == [{"amount": Decimal("1.10")}, {"amount": Decimal("1.11")}]

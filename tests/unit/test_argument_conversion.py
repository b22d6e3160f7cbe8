"""Arguments and results of types JSON lacks, converted by a handler's annotations: each goes to
JSON and comes back as its type, its JSON form is accepted at enqueue, a value that fits neither
is refused with the argument and the fix named, and a plain handler gets no codec at all."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from tenure import JobContext, TaskRegistry
from tenure.model.conversion import ArgumentMismatch, codec_for
from tenure.model.outcomes import ResultRefused


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    price: Decimal
    quantity: int = 1


@dataclasses.dataclass(frozen=True)
class Order:
    id: uuid.UUID
    placed_at: datetime
    lines: list[Line]
    note: str | None = None


class Customer(pydantic.BaseModel):
    name: str
    since: date


def typed(
    ctx: JobContext,
    when: datetime,
    order: Order,
    amounts: list[Decimal],
    colour: Colour,
    customer: Customer,
    day: date | None = None,
    plain: int = 0,
) -> Decimal:
    return Decimal("1")


def plain(ctx: JobContext, order_id: int, tags: list[str], when: str | None = None) -> dict[str, Any]:
    return {}


WHEN = datetime(2025, 1, 31, 9, 30, tzinfo=UTC)
ORDER = Order(uuid.UUID(int=7), WHEN, [Line("a-1", Decimal("19.99"), 2)])
VALUES: dict[str, Any] = {
    "when": WHEN,
    "order": ORDER,
    "amounts": [Decimal("0.10"), Decimal("12345678901234567890.01")],
    "colour": Colour.BLUE,
    "customer": Customer(name="Ann", since=date(2020, 2, 29)),
    "day": None,
    "plain": 3,
}


def test_every_supported_type_goes_to_json_and_comes_back_as_itself() -> None:
    """The encoded payload is plain JSON (it survives json.dumps/loads) and decodes to equal
    values of the annotated types, digits of a Decimal included."""
    codec = codec_for(typed)
    assert codec is not None
    stored = json.loads(json.dumps(codec.encode(VALUES)))
    assert stored["when"] == "2025-01-31T09:30:00+00:00"
    assert stored["amounts"] == ["0.10", "12345678901234567890.01"]
    back = codec.decode(stored)
    assert back == VALUES
    assert type(back["order"].lines[0].price) is Decimal


def test_the_json_form_is_accepted_at_enqueue_and_the_handler_gets_the_type() -> None:
    """An ISO string for a datetime, a dict for a dataclass or a pydantic model, a string for a
    UUID or a Decimal, a value for an enum: checked at encode, decoded to the type at run time."""
    codec = codec_for(typed)
    assert codec is not None
    given = {
        "when": "2025-01-31T09:30:00+00:00",
        "order": {
            "id": str(uuid.UUID(int=7)),
            "placed_at": "2025-01-31T09:30:00+00:00",
            "lines": [{"sku": "a-1", "price": "19.99", "quantity": 2}],
        },
        "amounts": ["0.10", 12345678901234567890],
        "colour": "blue",
        "customer": {"name": "Ann", "since": "2020-02-29"},
    }
    back = codec.decode(json.loads(json.dumps(codec.encode(given))))
    assert back["when"] == WHEN and back["order"] == ORDER and back["colour"] is Colour.BLUE
    assert back["amounts"] == [Decimal("0.10"), Decimal("12345678901234567890")]
    assert back["customer"] == VALUES["customer"]


@pytest.mark.parametrize(
    ("argument", "value", "said"),
    [
        ("when", 1738315800, "when is annotated datetime, but the value given is an integer; give a"),
        ("when", "next tuesday", "when is annotated datetime, but the value given is a string"),
        ("amounts", [Decimal(1), 0.1], "amounts[1] is annotated Decimal, but the value given is a number"),
        ("colour", "green", "colour is annotated Colour, but the value given is a string; give a Colour or"),
        ("order", {"id": str(uuid.UUID(int=1)), "lines": []}, "order does not fit Order: missing field(s)"),
        ("order", {**dataclasses.asdict(ORDER), "extra": 1}, "unknown field(s) extra"),
        ("order", {**dataclasses.asdict(ORDER), "note": 5}, "order.note is annotated str | None, but"),
        ("customer", {"name": "Ann", "since": "soon"}, "customer does not fit Customer: since: "),
        ("day", WHEN, "day is annotated date, but the value given is a datetime"),
    ],
)
def test_a_value_that_fits_neither_the_type_nor_its_json_form_is_refused(
    argument: str, value: Any, said: str
) -> None:
    """The refusal names the argument (and the item or field within it), its annotation, what
    was given and what to give, never the value itself."""
    codec = codec_for(typed)
    assert codec is not None
    with pytest.raises(ArgumentMismatch) as refused:
        codec.encode({**VALUES, argument: value})
    assert said in str(refused.value)
    assert "next tuesday" not in str(refused.value)


def test_results_convert_by_the_return_annotation() -> None:
    """A `-> Decimal` handler's result is stored as its digits and read back as a Decimal; a
    result that does not fit the annotation is refused as a result no JSON can store."""
    codec = codec_for(typed)
    assert codec is not None
    assert codec.encode_result(Decimal("1.10")) == "1.10"
    assert codec.decode_result("1.10") == Decimal("1.10")
    with pytest.raises(ResultRefused, match="the result is annotated Decimal, but the value given is a"):
        codec.encode_result(1.1)


def test_a_handler_of_json_types_has_no_codec_and_its_task_builds_its_codec_at_registration() -> None:
    """No converter for JSON annotations, unions of several types or none; a registered task
    holds its codec from registration on (no job builds one)."""
    assert codec_for(plain) is None
    assert codec_for(lambda ctx, **kw: None) is None
    registry = TaskRegistry()
    task = registry.register(typed, name="typed")
    assert "codec" in vars(task) and task.codec is not None
    assert set(task.codec.arguments) == {"when", "order", "amounts", "colour", "customer", "day"}

"""A worker's quick payload check answers exactly as binding the handler's signature would."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from tenure import JobContext, Tenure


def plain(ctx: JobContext, a: int, b: int = 1, *, c: int, d: int = 2) -> None: ...


def open_ended(ctx: JobContext, a: int, **rest: Any) -> None: ...


def positional_only(ctx: JobContext, a: int, /, b: int) -> None: ...


def star_args(ctx: JobContext, *args: Any, x: int) -> None: ...


def nothing(ctx: JobContext) -> None: ...


def renamed_context(c: JobContext, **rest: Any) -> None: ...


HANDLERS = [plain, open_ended, positional_only, star_args, nothing, renamed_context]
KEYS = ["a", "b", "c", "d", "x", "rest", "args", "ctx"]


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.__name__)
def test_quick_check_agrees_with_binding_for_every_payload_shape(handler: Callable[..., None]) -> None:
    """For every payload of up to four of the names, `accepts` refuses exactly the payloads that
    `inspect.signature(handler).bind` refuses, with binding's own words."""
    task = Tenure("postgresql://unused").task(handler, name=f"t.{handler.__name__}")
    signature = inspect.signature(handler)
    for size in range(5):
        for names in itertools.combinations(KEYS, size):
            payload = dict.fromkeys(names, 1)
            try:
                signature.bind(None, **payload)
                expected = None
            except TypeError as exc:
                expected = str(exc)
            assert task.accepts(payload, check_types=False) == expected, (handler.__name__, payload)

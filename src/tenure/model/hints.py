"""A handler's type hints, checked against a payload at enqueue: a value whose JSON type the
annotation rules out is refused before anything is written, instead of failing in the worker.

Only what JSON can carry is judged (bool, int, float, str, None, list, dict, and unions and
Optionals of them, with list and dict items one level down). The types JSON has no word for (a
datetime, a Decimal, a dataclass, ...) are converted and checked by tenure.model.conversion
before this check sees their JSON form; any other annotation (a TypedDict, a class of the
handler's own) is the handler's to check, and passes."""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from typing import Any

_JSON_TYPES: dict[type, str] = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
    type(None): "null",
}
_NOT_JUDGED = object()


@functools.cache
def _hints(handler: Callable[..., Any]) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(handler)
    except Exception:  # a forward reference to a name imported only for type checkers
        return {}
    hints.pop("return", None)
    return hints


def fits_json(value: Any, hint: Any) -> bool | object:
    """True or False when the annotation can be judged on JSON values, else _NOT_JUDGED."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        verdicts = [fits_json(value, arm) for arm in typing.get_args(hint)]
        if any(v is True for v in verdicts):
            return True
        return _NOT_JUDGED if any(v is _NOT_JUDGED for v in verdicts) else False
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (list, dict):
        if not isinstance(value, origin):
            return False
        args = typing.get_args(hint)
        items = value if origin is list else value.values()
        item_hint = args[0] if origin is list and args else args[1] if len(args) == 2 else Any
        return all(fits_json(item, item_hint) is not False for item in items)
    if hint in _JSON_TYPES:
        if isinstance(value, bool):
            return hint is bool  # JSON true is not the integer 1
        if hint is float:
            return isinstance(value, int | float)
        return isinstance(value, hint)
    return _NOT_JUDGED


def describe_annotation(hint: Any) -> str:
    """An annotation as a person reads it: `int | None`, not `typing.Optional[int]`."""
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("NoneType", "None")


def json_type_name(value: Any) -> str:
    """What a value is, in words: 'an integer', 'a string', 'a datetime'."""
    named = _JSON_TYPES.get(type(value))
    if named is not None:
        return named
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def payload_type_errors(handler: Callable[..., Any], payload: dict[str, Any]) -> list[str]:
    """One message per argument whose value the handler's annotation rules out. The value itself
    is not quoted: it may be a secret."""
    hints = _hints(handler)
    wrong = []
    for name, value in payload.items():
        hint = hints.get(name)
        if hint is not None and fits_json(value, hint) is False:
            got = json_type_name(value)
            wrong.append(f"{name} is annotated {describe_annotation(hint)}, but the value given is {got}")
    return wrong

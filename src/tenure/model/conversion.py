"""Arguments and results of types JSON has no word for, converted by the handler's annotations.

A handler may annotate its arguments and its return value with `datetime`, `date`, `time`,
`UUID`, `Decimal`, an `Enum`, a dataclass or a pydantic model (pydantic is used when the
application has it; Tenure does not depend on it), or a list, tuple, set, dict or Optional of
them. At enqueue each such argument is turned into JSON (an ISO string, a string of digits, a
dict of fields), checked against its annotation: a value given as its JSON form (an ISO string
for a datetime) is accepted too, and one that fits neither is refused before anything is
written. At run time the handler receives the annotated type; a result goes to JSON the same
way and comes back as its type from `app.result(...)`.

The converters are built once per task from its annotations (`codec_for`). A handler whose
annotations are all JSON types, or that has none, gets no codec at all, so its jobs pass through
untouched: the plain path pays nothing for this.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import enum
import functools
import types
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from tenure.model.errors import ValidationError
from tenure.model.hints import describe_annotation, fits_json, json_type_name
from tenure.model.outcomes import ResultRefused


class ArgumentMismatch(ValidationError):
    """A value does not fit its argument's annotation (the message names the argument, what it
    is annotated, what was given and what to give instead; never the value, which may be secret)."""


class Converter(abc.ABC):
    """One annotation's way to JSON and back."""

    annotation: str
    """The annotation as a person reads it, for messages."""

    @abc.abstractmethod
    def to_json(self, value: Any, path: str) -> Any:
        """The value as JSON; `value` may be the annotated type or its JSON form, which is checked."""

    @abc.abstractmethod
    def from_json(self, value: Any, path: str) -> Any:
        """The annotated type from its JSON form."""

    def refuse(self, value: Any, path: str, fix: str) -> ArgumentMismatch:
        return ArgumentMismatch(
            f"{path} is annotated {self.annotation}, but the value given is {json_type_name(value)}; {fix}"
        )


class _Parsed(Converter):
    """A scalar stored as a string: datetime, date, time, UUID."""

    def __init__(self, kind: type, parse: Callable[[str], Any], example: str) -> None:
        self.kind = kind
        self.parse = parse
        self.annotation = kind.__name__
        self.fix = f"give a {kind.__name__} or its ISO string (for example {example!r})"

    def _fits(self, value: Any) -> bool:
        # A datetime is a date to isinstance; as a date argument it would not come back as one.
        return isinstance(value, self.kind) and not (self.kind is dt.date and isinstance(value, dt.datetime))

    def to_json(self, value: Any, path: str) -> Any:
        if self._fits(value):
            return str(value) if self.kind is uuid.UUID else value.isoformat()
        if isinstance(value, str):
            return self.to_json(self.from_json(value, path), path)
        raise self.refuse(value, path, self.fix)

    def from_json(self, value: Any, path: str) -> Any:
        if isinstance(value, str):
            try:
                return self.parse(value)
            except ValueError:
                pass
        raise self.refuse(value, path, self.fix)


class _Decimal(Converter):
    """Stored as the string of its digits: jsonb would keep them, but JSON readers make floats."""

    annotation = "Decimal"
    fix = "give a Decimal, an int or a string of digits (a float has lost digits already)"

    def to_json(self, value: Any, path: str) -> Any:
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, int | str) and not isinstance(value, bool):
            return str(self.from_json(value, path))
        raise self.refuse(value, path, self.fix)

    def from_json(self, value: Any, path: str) -> Any:
        if isinstance(value, bool):
            raise self.refuse(value, path, self.fix)
        if isinstance(value, float):  # a number another step returned: as jsonb gave it back
            return Decimal(repr(value))
        try:
            return Decimal(value)
        except (InvalidOperation, TypeError, ValueError):
            raise self.refuse(value, path, self.fix) from None


class _Enum(Converter):
    def __init__(self, kind: type[enum.Enum]) -> None:
        self.kind = kind
        self.annotation = kind.__name__
        shown = ", ".join(repr(m.value) for m in list(kind)[:6])
        self.fix = f"give a {kind.__name__} or one of its values ({shown})"

    def to_json(self, value: Any, path: str) -> Any:
        member = value if isinstance(value, self.kind) else self.from_json(value, path)
        return member.value

    def from_json(self, value: Any, path: str) -> Any:
        try:
            return self.kind(value)
        except (ValueError, TypeError):
            raise self.refuse(value, path, self.fix) from None


class _Optional(Converter):
    def __init__(self, inner: Converter) -> None:
        self.inner = inner
        self.annotation = f"{inner.annotation} | None"

    def to_json(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.to_json(value, path)

    def from_json(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.from_json(value, path)


class _Items(Converter):
    """list[X], tuple[X, ...], set[X], frozenset[X]: stored as a JSON list."""

    def __init__(self, kind: type, item: Converter) -> None:
        self.kind = kind
        self.item = item
        self.annotation = f"{kind.__name__}[{item.annotation}]"

    def to_json(self, value: Any, path: str) -> Any:
        if not isinstance(value, list | tuple | set | frozenset):
            raise self.refuse(value, path, f"give a {self.kind.__name__}")
        return [self.item.to_json(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def from_json(self, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise self.refuse(value, path, f"give a {self.kind.__name__}")
        return self.kind(self.item.from_json(v, f"{path}[{i}]") for i, v in enumerate(value))


class _Mapping(Converter):
    """dict[str, X]: stored as a JSON object."""

    def __init__(self, item: Converter) -> None:
        self.item = item
        self.annotation = f"dict[str, {item.annotation}]"

    def to_json(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise self.refuse(value, path, "give a dict")
        return {k: self.item.to_json(v, f"{path}.{k}") for k, v in value.items()}

    def from_json(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise self.refuse(value, path, "give a dict")
        return {k: self.item.from_json(v, f"{path}.{k}") for k, v in value.items()}


class _Fields:
    """The named fields of a dataclass, each by its own annotation: the payload's own shape, one
    level down. A field of a JSON type is checked as a handler's argument is."""

    def __init__(self, hints: dict[str, Any], required: frozenset[str]) -> None:
        self.hints = hints
        self.required = required

    @functools.cached_property
    def converters(self) -> dict[str, Converter | None]:
        # Built on first use, so that a dataclass may hold itself (a tree of nodes).
        return {name: converter_for(hint) for name, hint in self.hints.items()}

    def fields_to_json(self, value: dict[str, Any], path: str, annotation: str) -> dict[str, Any]:
        unknown = sorted(set(value) - set(self.hints))
        missing = sorted(self.required - set(value))
        if unknown or missing:
            said = [f"unknown field(s) {', '.join(unknown)}"] if unknown else []
            said += [f"missing field(s) {', '.join(missing)}"] if missing else []
            said.append(f"its fields are {', '.join(self.hints)}")
            raise ArgumentMismatch(f"{path} does not fit {annotation}: {'; '.join(said)}")
        out = {}
        for name, item in value.items():
            converter, where = self.converters[name], f"{path}.{name}"
            if converter is not None:
                out[name] = converter.to_json(item, where)
                continue
            hint = self.hints[name]
            if fits_json(item, hint) is False:
                raise ArgumentMismatch(
                    f"{where} is annotated {describe_annotation(hint)}, but the value given is "
                    f"{json_type_name(item)}"
                )
            out[name] = item
        return out

    def fields_from_json(self, value: dict[str, Any], path: str) -> dict[str, Any]:
        converters = self.converters
        out = dict(value)
        for name, item in value.items():
            converter = converters.get(name)
            if converter is not None:
                out[name] = converter.from_json(item, f"{path}.{name}")
        return out


class _Dataclass(Converter):
    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.annotation = kind.__name__
        required = frozenset(
            f.name
            for f in dataclasses.fields(kind)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        names = {f.name for f in dataclasses.fields(kind) if f.init}
        hints = {k: v for k, v in _type_hints(kind).items() if k in names}
        self.fields = _Fields({name: hints.get(name, Any) for name in names}, required)

    def to_json(self, value: Any, path: str) -> Any:
        if isinstance(value, self.kind):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(self.kind) if f.init}
        elif not isinstance(value, dict):
            raise self.refuse(value, path, f"give a {self.annotation} or a dict of its fields")
        return self.fields.fields_to_json(value, path, self.annotation)

    def from_json(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise self.refuse(value, path, f"give a {self.annotation} or a dict of its fields")
        try:
            return self.kind(**self.fields.fields_from_json(value, path))
        except TypeError as exc:
            raise ArgumentMismatch(f"{path} does not fit {self.annotation}: {exc}") from None


class _PydanticModel(Converter):
    """A pydantic model (v2): pydantic validates, and writes its own JSON form."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind
        self.annotation = kind.__name__

    def _refused(self, exc: Exception, path: str) -> ArgumentMismatch:
        # Each error's place and message, never its input: the value may be secret.
        errors = getattr(exc, "errors", None)
        said = (
            "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" for e in errors()[:5])
            if callable(errors)
            else type(exc).__name__
        )
        return ArgumentMismatch(f"{path} does not fit {self.annotation}: {said}")

    def to_json(self, value: Any, path: str) -> Any:
        if not isinstance(value, self.kind):
            value = self.from_json(value, path)
        return value.model_dump(mode="json")

    def from_json(self, value: Any, path: str) -> Any:
        try:
            return self.kind.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise self._refused(exc, path) from None


def _is_pydantic_model(hint: Any) -> bool:
    return (
        isinstance(hint, type)
        and callable(getattr(hint, "model_validate", None))
        and callable(getattr(hint, "model_dump", None))
    )


_PARSED: dict[type, tuple[Callable[[str], Any], str]] = {
    dt.datetime: (dt.datetime.fromisoformat, "2025-01-31T09:30:00+00:00"),
    dt.date: (dt.date.fromisoformat, "2025-01-31"),
    dt.time: (dt.time.fromisoformat, "09:30:00"),
    uuid.UUID: (uuid.UUID, "12345678-1234-5678-1234-567812345678"),
}
_SEQUENCES = {list: list, tuple: tuple, set: set, frozenset: frozenset}


def converter_for(hint: Any) -> Converter | None:
    """How values of this annotation go to JSON and back; None when they are JSON already (or
    the annotation is one Tenure does not convert: they pass as they are, as before)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return converter_for(typing.get_args(hint)[0])
    if origin is typing.Union or origin is types.UnionType:
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(arms) == 1 and len(typing.get_args(hint)) == 2:
            inner = converter_for(arms[0])
            return None if inner is None else _Optional(inner)
        return None  # X | Y: which one a JSON value stands for is not known; passed as it is
    if origin in _SEQUENCES:
        args = typing.get_args(hint)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return None
        item = converter_for(args[0]) if args else None
        return None if item is None else _Items(_SEQUENCES[origin], item)
    if origin is dict:
        args = typing.get_args(hint)
        item = converter_for(args[1]) if len(args) == 2 and args[0] is str else None
        return None if item is None else _Mapping(item)
    if not isinstance(hint, type):
        return None
    if hint is Decimal:
        return _Decimal()
    if hint in _PARSED:
        parse, example = _PARSED[hint]
        return _Parsed(hint, parse, example)
    if issubclass(hint, enum.Enum):
        return _Enum(hint)
    if dataclasses.is_dataclass(hint):
        return _Dataclass(hint)
    if _is_pydantic_model(hint):
        return _PydanticModel(hint)
    return None


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # a forward reference to a name imported only for type checkers
        return {}


@dataclasses.dataclass(frozen=True)
class ArgumentCodec:
    """A task's converters: those of its arguments that need one, and of its result."""

    arguments: dict[str, Converter]
    result: Converter | None

    def encode(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload with each converted argument as JSON (a copy); ArgumentMismatch names
        the first argument that does not fit its annotation."""
        if not isinstance(payload, dict):
            return payload  # refused as it is by the payload check
        out = dict(payload)
        for name, converter in self.arguments.items():
            if name in out:
                out[name] = converter.to_json(out[name], name)
        return out

    def decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The stored payload with each converted argument as its annotated type (a copy)."""
        out = dict(payload)
        for name, converter in self.arguments.items():
            if name in out:
                out[name] = converter.from_json(out[name], name)
        return out

    def encode_result(self, value: Any) -> Any:
        """The handler's return value as JSON by its return annotation; ResultRefused when it
        does not fit."""
        if self.result is None:
            return value
        try:
            return self.result.to_json(value, "the result")
        except ArgumentMismatch as exc:
            fix = "return what the handler's return annotation says"
            raise ResultRefused(f"{exc}; {fix}", code="RESULT_NOT_JSON") from None

    def decode_result(self, value: Any) -> Any:
        """A stored result as the handler's return annotation says."""
        return value if self.result is None else self.result.from_json(value, "the result")


def codec_for(handler: Callable[..., Any]) -> ArgumentCodec | None:
    """The converters the handler's annotations call for; None when none does (the plain path)."""
    hints = _type_hints(handler)
    returned = hints.pop("return", None)
    arguments = {name: c for name, hint in hints.items() if (c := converter_for(hint)) is not None}
    result = None if returned is None else converter_for(returned)
    if not arguments and result is None:
        return None
    return ArgumentCodec(arguments, result)

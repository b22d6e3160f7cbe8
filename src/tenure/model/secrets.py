"""Secrets stay out of payloads.

A payload carries a *reference* (`tenure.secret("stripe/api-key")`, stored as
`{"$secret": "stripe/api-key"}`), and the worker resolves it at run time through a resolver the
application registers. Resolved values are `SecretValue`s: they print as `SecretValue('***')`,
so they do not reach logs, errors or tracebacks by accident, and they are never written back.
"""

from __future__ import annotations

import enum
import re
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from tenure.model.errors import ConfigurationError, Permanent, ValidationError

SECRET_KEY = "$secret"
_CREDENTIAL_NAME = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|api[_-]?key|private[_-]?key|auth(orization)?|credential|"
    r"access[_-]?key|session[_-]?key|cookie)$",
    re.IGNORECASE,
)

SecretResolver = Callable[[str], Awaitable[str] | str]


class CredentialPolicy(enum.StrEnum):
    """What enqueue does with a payload key that looks like a credential holding a plain value."""

    ALLOW = "allow"
    """Enqueue it as it is."""
    WARN = "warn"
    """Enqueue it, with a CredentialInPayloadWarning (the default)."""
    REFUSE = "refuse"
    """Refuse the enqueue with a ValidationError."""


def credential_policy_from(value: CredentialPolicy | str) -> CredentialPolicy:
    """The policy named by `value`, or a ConfigurationError that lists the choices."""
    try:
        return CredentialPolicy(value)
    except ValueError:
        choices = ", ".join(repr(p.value) for p in CredentialPolicy)
        raise ConfigurationError(f"credential_policy {value!r} is unknown: give one of {choices}") from None


class CredentialInPayloadWarning(UserWarning):
    """A payload key looks like a credential and holds a plain value."""


class SecretValue(str):
    """A resolved secret: a str whose repr and str in messages hide the value."""

    def __repr__(self) -> str:
        return "SecretValue('***')"

    def reveal(self) -> str:
        """The plain value, for the one call that needs it."""
        return str.__str__(self)


def secret(name: str) -> dict[str, str]:
    """A reference to a secret, to put in a payload instead of the secret itself."""
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValidationError(
            f"secret name {name!r} is invalid: give a non-empty string of at most 200 characters"
        )
    return {SECRET_KEY: name}


def is_secret_ref(value: object) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(SECRET_KEY), str)


def _looks_like_credential(key: object, item: object) -> bool:
    return (
        isinstance(key, str)
        and isinstance(item, str)
        and bool(item)
        and bool(_CREDENTIAL_NAME.search(key.replace("-", "_")))
    )


def has_plain_credentials(payload: dict[str, Any]) -> bool:
    """Whether credential_paths would find any, found without naming paths (every enqueue asks)."""
    stack: list[object] = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, dict) and not is_secret_ref(value):
            for key, item in value.items():
                if _looks_like_credential(key, item):
                    return True
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return False


def credential_paths(payload: dict[str, Any]) -> list[str]:
    """Paths of payload keys that look like credentials and hold a plain (non-reference) value."""
    found: list[str] = []
    stack: list[tuple[object, str]] = [(payload, "payload")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict) and not is_secret_ref(value):
            for key, item in value.items():
                child = f"{path}.{key}"
                if _looks_like_credential(key, item):
                    found.append(child)
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
    return sorted(found)


def check_credentials(payload: dict[str, Any], policy: CredentialPolicy) -> None:
    if policy is CredentialPolicy.ALLOW or not has_plain_credentials(payload):
        return
    paths = credential_paths(payload)
    message = (
        f"{', '.join(paths)} look(s) like credentials stored in the payload, which is kept in the "
        "database and shown to operators; pass tenure.secret('name') instead and register a "
        "secret resolver on the app"
    )
    if policy is CredentialPolicy.REFUSE:
        raise ValidationError(message)
    warnings.warn(message, CredentialInPayloadWarning, stacklevel=4)


async def resolve_secrets(payload: dict[str, Any], resolver: SecretResolver | None) -> dict[str, Any]:
    """A copy of `payload` with every secret reference replaced by its SecretValue."""

    async def resolve(value: Any) -> Any:
        if is_secret_ref(value):
            name = value[SECRET_KEY]
            if resolver is None:
                raise Permanent(
                    f"the payload references secret {name!r} but no secret resolver is registered; "
                    "call app.secret_resolver(fn) in the worker's app",
                    code="SECRET_UNRESOLVED",
                )
            try:
                resolved = resolver(name)
                if isinstance(resolved, Awaitable):
                    resolved = await resolved
            except Exception as exc:
                # Never chain: the resolver's exception may carry the value or the store's credentials.
                raise Permanent(
                    f"secret {name!r} could not be resolved ({type(exc).__name__})",
                    code="SECRET_UNRESOLVED",
                ) from None
            if not isinstance(resolved, str):
                raise Permanent(
                    f"the secret resolver returned {type(resolved).__name__} for {name!r}; "
                    "it must return the secret as a str",
                    code="SECRET_UNRESOLVED",
                )
            return SecretValue(resolved)
        if isinstance(value, dict):
            return {k: await resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [await resolve(v) for v in value]
        return value

    result = await resolve(payload)
    assert isinstance(result, dict)
    return result


def has_secret_refs(payload: object) -> bool:
    """Whether any value inside `payload` is a secret reference. Asked for every job a worker runs,
    so only a dict is asked whether it is one: a scalar or a list never can be."""
    stack = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if is_secret_ref(value):
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def resolved_values(payload: object) -> list[str]:
    """Every SecretValue inside a resolved payload, longest first (for redaction)."""
    found: set[str] = set()
    stack = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, SecretValue):
            found.add(value.reveal())
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return sorted((v for v in found if v), key=len, reverse=True)


def redact(text: str, values: list[str]) -> str:
    """`text` with every resolved secret value replaced by ***, before Tenure writes or logs it.

    This keeps Tenure's own writes clean (last_error, job_events, logs); it cannot stop a
    handler from printing a secret it was given, or a value transformed beyond recognition.
    """
    for value in values:
        text = text.replace(value, "***")
    return text

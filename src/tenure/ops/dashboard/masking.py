"""Payloads shown to operators with credential-looking values hidden."""

from __future__ import annotations

from typing import Any

from tenure.model.secrets import credential_paths, is_secret_ref

MASK = "••••••"


def masked_payload(value: Any) -> Any:
    """A copy of `value` whose plain values under credential-looking keys read as MASK.

    Each key is judged by the same detection enqueue warns with, so what a producer was warned
    about is exactly what the dashboard hides; secret references stay visible (they hold a name).
    """
    if isinstance(value, dict) and not is_secret_ref(value):
        return {
            key: MASK if isinstance(item, str) and credential_paths({key: item}) else masked_payload(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [masked_payload(item) for item in value]
    return value

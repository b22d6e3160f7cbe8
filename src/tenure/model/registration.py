"""Process-wide registrations (thread hooks, open-transaction providers): added once, removable."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def register_once(registry: list[T], item: T) -> Callable[[], None]:
    """Adds `item` to `registry` unless it is there already, and returns a function that takes it out
    again (calling that twice, or after someone else took it out, does nothing)."""
    if item not in registry:
        registry.append(item)

    def remove() -> None:
        if item in registry:
            registry.remove(item)

    return remove

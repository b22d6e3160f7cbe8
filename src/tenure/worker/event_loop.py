"""The event loop a worker process runs on: asyncio's own (the default), or uvloop's, chosen with
`tenure worker --event-loop uvloop` or TENURE_EVENT_LOOP=uvloop where uvloop is installed.

uvloop runs the same worker; the fifth round (docs/performance.md) measured its worker CPU per
no-op job between 8 us lower and 2 us higher than asyncio's, too close to the noise to make it the
default, and a handler's own libraries meet the loop too, some of which assume asyncio's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tenure.model.errors import ConfigurationError

EVENT_LOOP_ENV = "TENURE_EVENT_LOOP"
EVENT_LOOPS = ("asyncio", "uvloop")

T = TypeVar("T")


def chosen_event_loop(name: str | None) -> str:
    """`name`, else $TENURE_EVENT_LOOP, else asyncio; refused, with the choices, if unknown."""
    given = name or os.environ.get(EVENT_LOOP_ENV) or "asyncio"
    if given not in EVENT_LOOPS:
        source = "--event-loop" if name else f"${EVENT_LOOP_ENV}"
        raise ConfigurationError(
            f"{source} {given!r} is not an event loop Tenure runs on: give one of {', '.join(EVENT_LOOPS)}"
        )
    return given


def _factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if name == "asyncio":
        return None
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ConfigurationError(
            "the uvloop event loop is not installed: pip install 'tenure[uvloop]', or run on asyncio's "
            "(leave out --event-loop and $TENURE_EVENT_LOOP)"
        ) from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_on(name: str | None, main: Coroutine[Any, Any, T]) -> T:
    """Runs `main` to its end on a new loop of the kind `name` (asyncio or uvloop; None: as
    $TENURE_EVENT_LOOP says, else asyncio)."""
    try:
        factory = _factory(chosen_event_loop(name))
    except ConfigurationError:
        main.close()  # never started: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)

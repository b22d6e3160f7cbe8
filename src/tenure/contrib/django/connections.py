"""Django's database connections around each plain-function handler, as Django keeps them
around each request.

Django opens one connection per thread and closes it only at the end of a request (the
`request_finished` signal). A worker's handler threads serve no requests, so without this a
connection the server dropped (a restart, a failover, an idle timeout) stayed in its thread,
and every later job of that thread failed with "the connection is closed". Before and after
each handler, in the handler's own thread, this closes the thread's connections that Django
itself would drop: unusable after an error, or older than CONN_MAX_AGE. The next ORM call then
connects afresh.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from django.db import DatabaseError, InterfaceError, connections

log = logging.getLogger("tenure.worker")


def close_stale_connections() -> None:
    """Closes this thread's Django connections that are unusable or past CONN_MAX_AGE
    (`close_if_unusable_or_obsolete`, alias by alias, as Django does at each request's start
    and end)."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close_if_unusable_or_obsolete()
        except (DatabaseError, InterfaceError) as exc:
            # Closing a connection the server already dropped may itself fail; Django forgets
            # the connection either way, so the next ORM call reconnects.
            log.info("closing Django's connection %r failed: %s", conn.alias, type(exc).__name__)


@contextlib.contextmanager
def fresh_connections() -> Iterator[None]:
    """Entered around each thread handler (see `tenure.worker.executor.around_thread_handlers`):
    stale connections are closed before the handler, so it never starts on a dead one, and after
    it, so a connection its error left unusable does not wait for the thread's next job."""
    close_stale_connections()
    try:
        yield
    finally:
        close_stale_connections()

"""Whether a commit is on a synchronous standby: PostgreSQL's own word on each commit, and the
server's replication state.

A primary with `synchronous_standby_names` set acknowledges a commit once a synchronous standby
has flushed it. When that wait is cancelled (a `pg_cancel_backend`, a failover manager turning
synchronous replication off, a session terminated) PostgreSQL still answers the COMMIT as done,
with a WARNING: "canceling wait for synchronous replication ... The transaction has already
committed locally, but might not have been replicated to the standby". psycopg delivers it as a
notice on the connection. `CommitWatch` collects it around Tenure's own commits, so that such a
commit is reported as not replicated instead of as acknowledged.

A primary whose `synchronous_standby_names` is empty acknowledges every commit on its own, with no
warning at all; `ReplicationState` reads that from the server (gauge_replication), for `tenure
status`, the dashboard, the metrics and `require_sync_replication`.
"""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection, Connection
from psycopg.errors import Diagnostic

from tenure.model.errors import ConfigurationError

#: The PostgreSQL function that waits for synchronous standbys, and raises the WARNING when the
#: wait ends without them. Its name is not translated, unlike the message.
SYNC_WAIT_FUNCTION = "SyncRepWaitForLSN"
#: The start of the WARNING's message (English servers; the function name covers the others).
SYNC_WAIT_MESSAGES = (
    "canceling wait for synchronous replication",
    "canceling the wait for synchronous replication",
)


def says_not_replicated(notice: Diagnostic) -> bool:
    """Whether a notice is PostgreSQL's WARNING that a commit may not have been replicated."""
    if notice.source_function == SYNC_WAIT_FUNCTION:
        return True
    message = notice.message_primary or ""
    return message.startswith(SYNC_WAIT_MESSAGES)


@dataclass
class CommitWatch:
    """The not-replicated warnings a connection received while the watch was on."""

    warnings: list[str] = field(default_factory=list)

    def notice(self, notice: Diagnostic) -> None:
        if says_not_replicated(notice):
            self.warnings.append(notice.message_primary or "canceling wait for synchronous replication")

    @property
    def not_replicated(self) -> bool:
        return bool(self.warnings)

    def describe(self) -> str:
        return f'PostgreSQL said "{self.warnings[0]}": committed on the primary, might not be on a standby'


@contextlib.contextmanager
def watch_commits(conn: AsyncConnection[Any] | Connection[Any]) -> Iterator[CommitWatch]:
    """Collects, while the block runs, the warnings of commits on `conn` that may not be
    replicated. The notice handler is the connection's own, removed at the end, so this works on
    a pooled connection and on a caller's alike."""
    watch = CommitWatch()
    conn.add_notice_handler(watch.notice)
    try:
        yield watch
    finally:
        conn.remove_notice_handler(watch.notice)


class Replication(enum.StrEnum):
    """What a primary's replication means for a commit it acknowledges now."""

    SYNCHRONOUS = "synchronous"
    """A standby counted synchronous is connected: commits wait for it."""
    ASYNCHRONOUS = "asynchronous"
    """Standbys are there (streaming, or expected through their replication slots) but commits
    do not wait for any: a failover now can lose acknowledged commits."""
    WAITING = "waiting"
    """Commits are to wait for a synchronous standby, and none is connected: they block until one
    is, or until the wait is cancelled, and then may not be replicated."""
    NONE = "none"
    """No replication at all: one server, whose own durability is the promise."""
    STANDBY = "standby"
    """This server is a standby itself (read-only)."""
    UNKNOWN = "unknown"
    """Synchronous standbys are configured, but this role cannot see their state."""


#: The states in which an acknowledged commit can be lost by a failover, or wait for ever.
UNPROTECTED = frozenset({Replication.ASYNCHRONOUS, Replication.WAITING})


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """One reading of gauge_replication."""

    standby_names: str
    synchronous_commit: str
    in_recovery: bool
    stats_visible: bool
    standbys: int
    synchronous: int
    physical_slots: int

    @property
    def verdict(self) -> Replication:
        if self.in_recovery:
            return Replication.STANDBY
        replicas = self.standbys > 0 or self.physical_slots > 0
        if not self.standby_names.strip() or self.synchronous_commit in ("off", "local"):
            return Replication.ASYNCHRONOUS if replicas else Replication.NONE
        if not self.stats_visible:
            return Replication.UNKNOWN
        return Replication.SYNCHRONOUS if self.synchronous > 0 else Replication.WAITING

    @property
    def unprotected(self) -> bool:
        return self.verdict in UNPROTECTED

    def describe(self) -> str:
        """One line for a person: what a commit acknowledged now is worth."""
        verdict = self.verdict
        if verdict is Replication.SYNCHRONOUS:
            return f"{self.synchronous} synchronous standby(s) of {self.standbys} connected"
        if verdict is Replication.ASYNCHRONOUS:
            why = (
                f"synchronous_commit is {self.synchronous_commit}"
                if self.standby_names.strip()
                else "synchronous_standby_names is empty"
            )
            return (
                f"no synchronous standby ({why}; {self.standbys} standby(s) streaming, "
                f"{self.physical_slots} replication slot(s)): commits are acknowledged on the primary "
                "alone, and a failover now can lose them"
            )
        if verdict is Replication.WAITING:
            return (
                f"synchronous_standby_names is {self.standby_names!r} but no synchronous standby is "
                "connected: commits wait until one is"
            )
        if verdict is Replication.UNKNOWN:
            return (
                "synchronous standbys are configured, but this role cannot see them: grant it "
                "pg_read_all_stats (or pg_monitor) to tell"
            )
        if verdict is Replication.STANDBY:
            return "this server is a standby"
        return "a single server without replication"

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.verdict.value,
            "unprotected": self.unprotected,
            "synchronous_standby_names": self.standby_names,
            "synchronous_commit": self.synchronous_commit,
            "standbys": self.standbys,
            "synchronous_standbys": self.synchronous if self.stats_visible else None,
            "replication_slots": self.physical_slots,
            "detail": self.describe(),
        }


#: Set to 1 (true, yes, on) to make every client and worker of the process require a synchronous
#: standby for each acknowledgement, as `require_sync_replication=True` does.
REQUIRE_SYNC_ENV = "TENURE_REQUIRE_SYNC_REPLICATION"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def sync_required(given: bool | None) -> bool:
    """`require_sync_replication` as given, else as $TENURE_REQUIRE_SYNC_REPLICATION says."""
    if given is not None:
        return bool(given)
    text = os.environ.get(REQUIRE_SYNC_ENV, "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(
        f"{REQUIRE_SYNC_ENV}={text!r} is not a yes or no: set it to 1 to require a synchronous "
        "standby for every acknowledgement, or to 0 (or leave it unset) not to"
    )

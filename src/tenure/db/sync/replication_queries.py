# Generated from src/tenure/db/replication_queries.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Reading the server's replication state, and waiting for a synchronous standby to confirm a
commit (`require_sync_replication`). Written once, async; tools/async_to_sync.py writes its
blocking twin (tenure.db.sync.replication_queries), which the blocking client runs."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import Connection

from tenure.db.replication import CommitWatch, Replication, ReplicationState
from tenure.db.sqlfiles import named_queries
from tenure.db.sync.fetch import fetch
from tenure.db.wakeups import owns_commit
from tenure.model.errors import ConfigurationError, NoSynchronousStandby, NotReplicated

#: The first pause between two looks at the standby's position, doubled up to CONFIRM_PAUSE_MAX.
CONFIRM_PAUSE = 0.005
CONFIRM_PAUSE_MAX = 0.1
#: How long a client waits for a synchronous standby to confirm its commit, with
#: `require_sync_replication`, before it reports the commit as not replicated.
CLIENT_CONFIRM_SECONDS = 5.0


class Acknowledgement:
    """What became of one commit Tenure made: the jobs it wrote, and, when no synchronous standby
    is known to have them, why."""

    def __init__(self) -> None:
        self.job_ids: list[int] = []
        self.problem: str | None = None

    @property
    def replicated(self) -> bool:
        return self.problem is None

    def raise_if_not_replicated(self) -> None:
        if self.problem is None:
            return
        ids = self.job_ids
        shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
        raise NotReplicated(
            f"{len(ids)} job(s) committed on the primary but not known to be on a standby "
            f"({self.problem}). They exist there (ids {shown}) and run if it stays the primary; a "
            "failover now would lose them: look them up after it before enqueueing them again",
            tuple(ids),
        )


class ReplicationQueries:
    def __init__(self, schema: str) -> None:
        self._sql = named_queries(schema)

    def state(self, conn: Connection[Any]) -> ReplicationState:
        """The server's replication state now (gauge_replication)."""
        [row] = fetch(conn, self._sql["gauge_replication"], {})
        return ReplicationState(**row)

    def confirmed(self, conn: Connection[Any], within: float) -> bool:
        """Whether a standby counted synchronous has flushed everything this server had written
        when asked, which covers every commit this session has seen acknowledged; asks again
        until it has, or `within` seconds have passed. Run it on the connection that committed,
        after the commit."""
        deadline = time.monotonic() + within
        lsn: str | None = None
        pause = CONFIRM_PAUSE
        while True:
            [row] = fetch(conn, self._sql["replication_confirmed"], {"lsn": lsn})
            if row["confirmed"]:
                return True
            lsn = row["lsn"]
            if time.monotonic() + pause > deadline:
                return False
            time.sleep(pause)
            pause = min(2 * pause, CONFIRM_PAUSE_MAX)

    def require_synchronous(self, conn: Connection[Any]) -> None:
        """Raises unless a synchronous standby is connected now: NoSynchronousStandby (nothing
        was written), or ConfigurationError when this role cannot see the standbys."""
        state = self.state(conn)
        verdict = state.verdict
        if verdict is Replication.SYNCHRONOUS:
            return
        if verdict is Replication.UNKNOWN:
            raise ConfigurationError(
                "require_sync_replication reads the standbys' state in pg_stat_replication, which "
                "this role cannot see: grant it pg_read_all_stats (or pg_monitor), or turn "
                "require_sync_replication off"
            )
        raise NoSynchronousStandby(
            f"require_sync_replication refused the write, nothing was written: {state.describe()}. "
            "Write again once the primary has a synchronous standby"
        )

    def acknowledged(
        self, conn: Connection[Any], *, strict: bool, within: float = CLIENT_CONFIRM_SECONDS
    ) -> Acknowledging:
        """Around a write on `conn`: whether its commit is known to be on a synchronous standby.

        PostgreSQL's warning that a commit may not be replicated always sets the Acknowledgement's
        `problem`; one that came just before the session was terminated raises NotReplicated.
        With `strict`, the write is refused before it is made unless a synchronous standby is
        connected (require_synchronous), and a commit of the block's own (an autocommit `conn`
        outside a transaction) counts as replicated only once a synchronous standby has
        confirmed it, within `within` seconds. A commit that is the caller's, after the block,
        is the caller's to watch (tenure.db.replication.watch_commits)."""
        return Acknowledging(self, conn, strict, within)


class Acknowledging:
    """ReplicationQueries.acknowledged's block. A class rather than a generator's context: it is
    around every enqueue and every completion batch, and a generator's context costs a dozen
    calls more each time."""

    def __init__(
        self, queries: ReplicationQueries, conn: Connection[Any], strict: bool, within: float
    ) -> None:
        self.queries = queries
        self.conn = conn
        self.strict = strict
        self.within = within
        self.own = False
        self.ack = Acknowledgement()
        self.watch = CommitWatch()

    def __enter__(self) -> Acknowledgement:
        if self.strict:
            self.own = owns_commit(self.conn)  # read before the block: its statement commits
            self.queries.require_synchronous(self.conn)
        # The connection's own handler, removed at the end: this works on a pooled connection and
        # on a caller's alike (watch_commits).
        self.conn.add_notice_handler(self.watch.notice)
        return self.ack

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.conn.remove_notice_handler(self.watch.notice)
        watch, ack = self.watch, self.ack
        if exc is not None:
            if isinstance(exc, psycopg.OperationalError) and watch.not_replicated:
                raise NotReplicated(
                    f"{watch.describe()}, and then the session ended. Find out what landed "
                    "before writing again",
                ) from exc
            return
        if watch.not_replicated:
            ack.problem = watch.describe()
        elif self.strict and self.own and not self.queries.confirmed(self.conn, self.within):
            ack.problem = f"no synchronous standby confirmed the commit within {self.within:g}s"

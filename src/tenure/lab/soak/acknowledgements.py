"""Every enqueue the soak's producer was told about, with the replication state it was told under.

A sampler reads the primary's replication state (tenure.db.replication: synchronous, asynchronous,
waiting, ...) every SAMPLE_EVERY seconds, and, on a pg_auto_failover cluster, each node's state
as the monitor has it. Each acknowledgement is filed under the latest sample, so a job missing at
the end can be told apart: acknowledged while a synchronous standby confirmed commits, or while
the primary acknowledged them alone. Enqueues PostgreSQL answered with "might not have been
replicated" (NotReplicated) are counted apart: they were never acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenure.db.connect import connect
from tenure.db.replication_queries import ReplicationQueries

#: Seconds between two readings of the replication state.
SAMPLE_EVERY = 0.25
#: Missing jobs the report describes one by one.
MISSING_SHOWN = 20


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the soak started
    state: str
    detail: str
    cluster: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at, 2),
            "state": self.state,
            "detail": self.detail,
            "cluster": self.cluster,
        }


UNREAD = Sample(0.0, "unread", "no reading yet (or the primary could not be read)", {})


class Acknowledgements:
    def __init__(
        self,
        dsn: str,
        schema: str,
        started: float,
        cluster_states: Callable[[], dict[str, tuple[str, str]] | None] = lambda: None,
    ) -> None:
        """`cluster_states`: each node's (reported, assigned) state from the monitor (None: no
        monitor)."""
        self.dsn = dsn
        self.queries = ReplicationQueries(schema)
        self.started = started
        self.cluster_states = cluster_states
        self.latest = UNREAD
        self.at_acknowledgement: dict[int, Sample] = {}
        #: Jobs whose enqueue raised NotReplicated: committed on a primary, never acknowledged.
        self.not_replicated: list[int] = []
        #: NotReplicated enqueues whose ids PostgreSQL could not give (the session ended).
        self.not_replicated_unknown = 0

    def acknowledged(self, job_ids: list[int]) -> None:
        for job_id in job_ids:
            self.at_acknowledgement[job_id] = self.latest

    def refused(self, job_ids: tuple[int, ...]) -> None:
        if job_ids:
            self.not_replicated.extend(job_ids)
        else:
            self.not_replicated_unknown += 1

    async def sample(self, stop: asyncio.Event) -> None:
        """Reads the state every SAMPLE_EVERY seconds until `stop` is set; a reading that fails
        (no writable node just then) leaves the state unread until the next one succeeds."""
        while not stop.is_set():
            self.latest = await self._read()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_EVERY)

    async def _read(self) -> Sample:
        at = time.monotonic() - self.started
        cluster: dict[str, str] = {}
        with contextlib.suppress(Exception):
            states = await asyncio.to_thread(self.cluster_states) or {}
            cluster = {name: f"{r}/{g}" if r != g else r for name, (r, g) in sorted(states.items())}
        try:
            async with await connect(self.dsn, timeout=2) as conn:
                state = await self.queries.state(conn)
        except Exception as exc:  # a failover under way: say so, and read again
            return Sample(at, "unread", f"{type(exc).__name__}: {str(exc).strip()[:160]}", cluster)
        return Sample(at, state.verdict.value, state.describe(), cluster)

    def counts(self) -> dict[str, int]:
        """How many acknowledgements were made in each replication state."""
        return dict(Counter(s.state for s in self.at_acknowledgement.values()))

    def of(self, job_ids: list[int]) -> list[dict[str, Any]]:
        """The state each of `job_ids` (the first MISSING_SHOWN) was acknowledged under."""
        return [
            {"job": job_id, **self.at_acknowledgement.get(job_id, UNREAD).as_dict()}
            for job_id in job_ids[:MISSING_SHOWN]
        ]

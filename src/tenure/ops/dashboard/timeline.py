"""A job's history as one timeline: its audit events, plus what the job row itself says (when it
was enqueued, last claimed and finished), in the order they happened."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tenure.model.jobs import Job, JobEvent


@dataclass(frozen=True, slots=True)
class Entry:
    at: datetime
    kind: str
    title: str
    detail: str = ""
    token: int | None = None
    worker: str | None = None
    error_code: str | None = None
    note: str | None = None


def _transition(e: JobEvent) -> str:
    if e.from_state and e.to_state:
        return f"{e.from_state.value} → {e.to_state.value}"
    return f"while {e.from_state.value}" if e.from_state else ""


def timeline(job: Job, events: list[JobEvent]) -> list[Entry]:
    entries = [Entry(job.created_at, "created", "enqueued")]
    entries += [
        Entry(
            e.at, e.event, e.event.replace("_", " "), _transition(e), e.token, e.worker, e.error_code, e.error
        )
        for e in events
    ]
    if job.attempted_at is not None:
        entries.append(
            Entry(
                job.attempted_at,
                "claimed",
                "last claimed",
                f"attempt {job.attempt_count}",
                job.lease_token,
                job.lease_owner,
                note="earlier claims keep no row of their own; those that ended off the happy path are here",
            )
        )
    if job.finished_at is not None:
        entries.append(
            Entry(job.finished_at, f"finished {job.state.value}", job.state.value, "", job.lease_token)
        )
    # Stable: an event and the row's own time at the same instant keep the order above.
    return sorted(entries, key=lambda entry: entry.at)

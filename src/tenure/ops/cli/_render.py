"""Human output shared by the commands: times absolute and relative, JSON pretty-printed, a job as
a panel and its history as a table, an error as its own line. Never a Python repr."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from tenure.model.jobs import Job, JobEvent
from tenure.ops.views.durations import relative

#: Lines of a traceback that are not the exception's own: its header, and the chaining notes.
_FRAME = re.compile(r'^\s+File "')
_TRACEBACK_NOISE = re.compile(
    r"^(Traceback \(most recent call last\)|During handling of|The above exception)"
)


def when(at: datetime | None, now: datetime | None = None) -> str:
    """'2026-12-01 16:45:42 UTC (3.2m ago)': absolute, and relative when `now` is known."""
    if at is None:
        return "-"
    text = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{text} ({relative(at, now)})" if now is not None else text


def plain(value: Any) -> str:
    """A value as a person reads it: enums by their value, times as `when`, JSON for the rest."""
    if value is None:
        return "-"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, str | int | float | bool | uuid.UUID):
        return str(value)
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)


def pretty_json(value: Any) -> Syntax:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return Syntax(text, "json", theme="ansi_dark", background_color="default", word_wrap=True)


def error_line(text: str | None) -> str:
    """What a failure says, on one line: for a traceback, the exception's own line (the last
    unindented line, 'Permanent: no such mailbox'); else the message's first line."""
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    # A stored traceback keeps its end (the exception) and may have lost its start.
    if any(line.startswith("Traceback (most recent call last)") or _FRAME.match(line) for line in lines):
        own = [line for line in lines if not line[0].isspace() and not _TRACEBACK_NOISE.match(line)]
        return (own[-1] if own else lines[-1]).strip()
    return lines[0].strip() if lines else ""


def facts(rows: list[tuple[str, str]], title: str | None = None) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in rows:
        table.add_row(name, escape(value))
    return Panel(table, title=title, title_align="left", expand=False)


def job_panel(job: Job, now: datetime | None = None) -> RenderableType:
    """A job's facts, then its payload (and progress and result) as JSON."""
    rows = [
        ("state", job.state.value),
        ("queue", job.queue),
        ("task", job.task),
        ("attempts", f"{job.attempt_count} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        ("token", str(job.lease_token)),
        ("lease owner", job.lease_owner or "-"),
        ("lease expires", when(job.lease_expires_at, now)),
        ("deadline", when(job.lease_deadline, now)),
        ("available at", when(job.available_at, now)),
        ("created", when(job.created_at, now)),
        ("last attempt", when(job.attempted_at, now)),
        ("finished", when(job.finished_at, now)),
        ("ordering key", job.ordering_key or "-"),
        ("idempotency key", plain(job.idempotency_key)),
    ]
    if job.last_error_code or job.last_error:
        rows.append(("last error", f"{job.last_error_code or ''} {error_line(job.last_error)}".strip()))
    parts: list[RenderableType] = [facts(rows, title=f"job {job.id}"), "payload", pretty_json(job.payload)]
    if job.progress is not None:
        parts += ["progress", pretty_json(job.progress)]
    if job.result is not None:
        parts += ["result", pretty_json(job.result)]
    return Group(*parts)


def history_table(events: list[JobEvent], title: str) -> Table:
    """Oldest first; times to the second in UTC, the transition under its event, so a row fits an
    80-column terminal."""
    table = Table(title=f"{title} (times UTC)")
    table.add_column("at", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("token", justify="right", no_wrap=True)
    table.add_column("by · code · note", overflow="fold")
    for e in events:
        moved = " → ".join(s.value for s in (e.from_state, e.to_state) if s is not None)
        note = " · ".join(part for part in (e.worker, e.error_code, error_line(e.error)[:100]) if part)
        table.add_row(
            e.at.astimezone(UTC).strftime("%m-%d %H:%M:%S"),
            escape(e.event) + (f"\n[dim]{escape(moved)}[/dim]" if moved else ""),
            str(e.token),
            escape(note),
        )
    return table

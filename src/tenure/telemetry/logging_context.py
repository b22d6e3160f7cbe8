"""Structured, bounded logs: every line about a job names the job, and nothing private leaks.

A worker binds the job it is running to a context variable (each job runs in its own asyncio
task, so the binding follows the job and nothing else); a filter copies those fields onto every
record logged from there. Lines logged about a job from elsewhere (the heartbeat, the watchdog)
pass the same fields with `extra=job_fields(...)`.

Payloads are never logged. Messages and exception text are cut to a bound, because an error
message may quote its input (M: "payloads and error fields stay bounded and private in logs").
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Protocol

JOB_FIELDS = ("job_id", "queue", "task", "attempt", "token", "worker")
MAX_MESSAGE_CHARS = 500
MAX_EXCEPTION_CHARS = 200
_HANDLER_NAME = "tenure"

#: The job (and worker) the current context runs; its fields are built only when a line is logged.
_bound: contextvars.ContextVar[tuple[Any, str] | None] = contextvars.ContextVar("tenure_job", default=None)


class _JobLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def queue(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def lease(self) -> Any: ...


def job_fields(job: _JobLike, worker: str) -> dict[str, Any]:
    """The identifying fields of a job attempt, for `extra=` on a log call."""
    return {
        "job_id": job.id,
        "queue": job.queue,
        "task": job.task,
        "attempt": job.attempt,
        "token": job.lease.token,
        "worker": worker,
    }


def bind_job(job: _JobLike, worker: str) -> None:
    """Tags every record logged from the current context (the job's own task) with the job."""
    _bound.set((job, worker))


def bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class JobContextFilter(logging.Filter):
    """Adds the bound job's fields to a record that does not carry them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _bound.get()
        if bound is not None and not hasattr(record, "job_id"):
            for name, value in job_fields(*bound).items():
                setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, bounded message, job fields, error type."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": bounded(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["error_type"] = type(exc).__name__
            entry["error"] = bounded(str(exc), MAX_EXCEPTION_CHARS)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The plain format, with the job fields appended as key=value and the message bounded."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = bounded(record.message, MAX_MESSAGE_CHARS)
        line = super().formatMessage(record)
        fields = [f"{n}={getattr(record, n)}" for n in JOB_FIELDS if getattr(record, n, None) is not None]
        return f"{line} [{' '.join(fields)}]" if fields else line

    def formatException(self, ei: Any) -> str:
        exc = ei[1]
        return f"{type(exc).__name__}: {bounded(str(exc), MAX_EXCEPTION_CHARS)}"


def configure_logging(*, level: int = logging.WARNING, fmt: str = "text", stream: Any = None) -> None:
    """Installs Tenure's handler on the root logger with the chosen format ('text' or 'json'),
    replacing the one a previous call installed."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)  # only our own: handlers others installed (a test's capture) stay
    root.addHandler(handler)
    root.setLevel(level)

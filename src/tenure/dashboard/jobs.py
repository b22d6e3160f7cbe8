"""The jobs list (filters, keyset paging) and the page of one job."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from tenure.dashboard.masking import masked_payload
from tenure.dashboard.queries import JobFilter
from tenure.dashboard.state import dashboard_of
from tenure.jobs import JobState

PAGE_SIZE = 50
MAX_CONTAINS_BYTES = 4096
MAX_TEXT_FILTER = 200
STATES = [s.value for s in JobState]


class BadFilter(ValueError):
    """A filter the list cannot run; its message is shown to the operator."""


def _text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    if len(value) > MAX_TEXT_FILTER:
        raise BadFilter(f"the {name} filter is longer than {MAX_TEXT_FILTER} characters")
    return value or None


def parse_filter(request: Request) -> JobFilter:
    state = _text(request, "state")
    if state is not None and state not in STATES:
        raise BadFilter(f"state {state!r} is unknown: choose one of {', '.join(STATES)}")
    contains = None
    raw = request.query_params.get("payload", "").strip()
    if raw:
        if len(raw.encode()) > MAX_CONTAINS_BYTES:
            raise BadFilter(f"the payload filter is larger than {MAX_CONTAINS_BYTES} bytes")
        try:
            contains = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadFilter(
                f"the payload filter is not valid JSON ({exc.msg} at character {exc.pos})"
            ) from None
        if not isinstance(contains, dict):
            raise BadFilter('the payload filter must be a JSON object, like {"customer_id": 7}')
    before = None
    raw_before = request.query_params.get("before", "").strip()
    if raw_before:
        if not raw_before.isdigit() or len(raw_before) > 19:
            raise BadFilter("before must be a job id")
        before = int(raw_before)
    return JobFilter(
        queue=_text(request, "queue"),
        task=_text(request, "task"),
        state=state,
        error_code=_text(request, "error_code"),
        contains=contains,
        before=before,
    )


async def jobs_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    form = {k: request.query_params.get(k, "") for k in ("queue", "task", "state", "error_code", "payload")}
    try:
        where = parse_filter(request)
    except BadFilter as exc:
        context: dict[str, Any] = {
            "form": form,
            "states": STATES,
            "jobs": [],
            "error": str(exc),
            "next": None,
        }
        return board.render(request, "jobs.html", context, status=400)
    async with board.pool.connection() as conn:
        rows = await board.pages.jobs_list(conn, where, PAGE_SIZE + 1)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    next_query = None
    if more:
        kept = {k: v for k, v in form.items() if v}
        next_query = {**kept, "before": str(rows[-1]["id"])}
    context = {"form": form, "states": STATES, "jobs": rows, "error": None, "next": next_query}
    return board.render(request, "jobs.html", context)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


async def job_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    job_id = int(request.path_params["job_id"])
    async with board.pool.connection() as conn:
        job = await board.queries.job_get(conn, job_id)
        if job is None:
            missing = {"title": "No such job", "message": f"there is no job {job_id}"}
            return board.render(request, "message.html", missing, status=404)
        events = await board.queries.job_events_list(conn, job_id)
        effects = await board.effects.list(conn, job_id=job_id, limit=200)
    context = {
        "job": job,
        "payload": pretty(masked_payload(job.payload)),
        "progress": None if job.progress is None else pretty(masked_payload(job.progress)),
        "result": None if job.result is None else pretty(masked_payload(job.result)),
        "events": events,
        "effects": [
            {**e, "outcome": None if e["outcome"] is None else pretty(e["outcome"])} for e in effects
        ],
        "done": DONE_MESSAGES.get(request.query_params.get("done", "")),
    }
    return board.render(request, "job.html", context)


#: What a finished action says on the page it returns to; fixed texts, so nothing is reflected.
DONE_MESSAGES = {
    "retried": "The job was sent back to run.",
    "cancelled": "The job was cancelled.",
}

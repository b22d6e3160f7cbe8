"""The jobs list (filters, keyset paging) and the page of one job."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from tenure.model.jobs import JobState
from tenure.ops.dashboard.filters import JOB_FIELDS, STATES, BadFilter, form_of, job_filter
from tenure.ops.dashboard.masking import masked_payload
from tenure.ops.dashboard.state import dashboard_of
from tenure.ops.dashboard.timeline import timeline
from tenure.ops.dashboard.waits import shown_waits

PAGE_SIZE = 50


async def jobs_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    form = form_of(request.query_params, JOB_FIELDS)
    context: dict[str, Any] = {"form": form, "states": STATES, "jobs": [], "error": None, "next": None}
    try:
        where = job_filter(request.query_params)
    except BadFilter as exc:
        return board.render(request, "jobs.html", {**context, "error": str(exc)}, status=400)
    async with board.pool.connection() as conn:
        rows = await board.pages.jobs_list(conn, where, PAGE_SIZE + 1)
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        kept = {k: v for k, v in form.items() if v}
        context["next"] = {**kept, "before": str(rows[-1].id)}
    return board.render(request, "jobs.html", {**context, "jobs": rows})


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
        began = await board.waits.waits_of(conn, job_id)
        waits = shown_waits(began, await board.control.db_now(conn)) if began else []
    # The wait a waiting job is in now: what the page's end-wait and signal forms act on.
    current = (
        next((w for w in waits if w.state == "waiting"), None) if job.state is JobState.WAITING else None
    )
    context = {
        "job": job,
        "payload": pretty(masked_payload(job.payload)),
        "progress": None if job.progress is None else pretty(masked_payload(job.progress)),
        "result": None if job.result is None else pretty(masked_payload(job.result)),
        "timeline": timeline(job, events),
        "effects": [(e, None if e.outcome is None else pretty(e.outcome)) for e in effects],
        "waits": waits,
        "current_wait": current,
        "done": DONE_MESSAGES.get(request.query_params.get("done", "")),
    }
    return board.render(request, "job.html", context)


#: What a finished action says on the page it returns to; fixed texts, so nothing is reflected.
DONE_MESSAGES = {
    "retried": "The job was sent back to run.",
    "cancelled": "The job was cancelled.",
    "requeued": "The job's lease was revoked and it is pending again, to run at once under a new token.",
    "skipped": "The job was skipped: cancelled, so the next job of its ordering key can run.",
    "effect_done": "The effect is recorded as done: no attempt performs it again.",
    "effect_not_happened": "The effect is recorded as not happened: the next attempt performs it.",
    "wait_ended": "The job's wait was ended: it is pending, to run again at once, and its wait "
    "returns `ended`.",
    "signal_delivered": "The signal woke this job, the one waiting longest for its key: it is pending, "
    "to run again at once.",
    "signal_kept": "No job waits for that key now: the signal is kept for the next job that waits for "
    "it, for 7 days.",
    "signal_duplicate": "A signal with this idempotency key was sent to that key before: nothing was "
    "sent this time.",
}

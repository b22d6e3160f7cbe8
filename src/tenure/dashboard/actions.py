"""The dashboard's acts: each a POST with a reason and the session's CSRF token, calling the
library's verb (guarded in SQL, written to the audit log) as `dashboard:<user>`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from tenure.control import ControlRefused
from tenure.dashboard.security import CSRF_COOKIE, CSRF_FIELD, LOCAL_USER, csrf_matches
from tenure.dashboard.state import Dashboard, dashboard_of
from tenure.errors import ValidationError

MAX_FORM_BYTES = 16 * 1024

Act = Callable[[Dashboard, str, str], Awaitable[str]]
"""Does the act with (dashboard, actor, reason) and returns the URL to go back to."""


def _refuse(board: Dashboard, request: Request, status: int, title: str, message: str) -> HTMLResponse:
    return board.render(request, "message.html", {"title": title, "message": message}, status=status)


async def _form(request: Request) -> dict[str, str] | None:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return None
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


async def run_act(request: Request, act: Act) -> Response:
    board = dashboard_of(request)
    if board.read_only:
        return _refuse(board, request, 403, "Read-only", "this dashboard is read-only: it takes no actions")
    form = await _form(request)
    if form is None:
        return _refuse(board, request, 413, "Too large", "the form is too large")
    if not csrf_matches(request.cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)):
        return _refuse(
            board, request, 403, "Refused", "the form's security token is missing or wrong: reload the page"
        )
    reason = form.get("reason", "").strip()
    if not reason:
        return _refuse(board, request, 400, "A reason is needed", "give a reason: it goes into the audit log")
    actor = f"dashboard:{getattr(request.state, 'user', LOCAL_USER)}"
    try:
        back = await act(board, actor, reason)
    except ControlRefused as exc:
        return _refuse(board, request, 409, "Refused", str(exc))
    except ValidationError as exc:
        return _refuse(board, request, 400, "Not valid", str(exc))
    return RedirectResponse(back, status_code=303)


async def retry_job(request: Request) -> Response:
    job_id = int(request.path_params["job_id"])

    async def act(board: Dashboard, actor: str, reason: str) -> str:
        await board.client.retry([job_id], reason=reason, actor=actor)
        return f"{request.url_for('job', job_id=job_id)}?done=retried"

    return await run_act(request, act)


async def cancel_job(request: Request) -> Response:
    job_id = int(request.path_params["job_id"])

    async def act(board: Dashboard, actor: str, reason: str) -> str:
        await board.client.cancel([job_id], reason=reason, actor=actor)
        return f"{request.url_for('job', job_id=job_id)}?done=cancelled"

    return await run_act(request, act)


async def pause_queue(request: Request) -> Response:
    queue = request.path_params["queue"]

    async def act(board: Dashboard, actor: str, reason: str) -> str:
        await board.client.pause_queue(queue, reason=reason, actor=actor)
        return str(request.url_for("overview"))

    return await run_act(request, act)


async def resume_queue(request: Request) -> Response:
    queue = request.path_params["queue"]

    async def act(board: Dashboard, actor: str, reason: str) -> str:
        await board.client.resume_queue(queue, reason=reason, actor=actor)
        return str(request.url_for("overview"))

    return await run_act(request, act)

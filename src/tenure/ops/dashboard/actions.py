"""The dashboard's acts: each a POST with a reason and the session's CSRF token, calling the
library's verb (guarded in SQL, written to the audit log) as `dashboard:<user>`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol, TypeVar
from urllib.parse import parse_qs

import psycopg
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from tenure.model.errors import DatabaseUnavailable, ValidationError
from tenure.ops.dashboard.security import CSRF_COOKIE, CSRF_FIELD, LOCAL_USER, csrf_matches
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.producer.client import Client
from tenure.producer.control import ControlRefused, check_reason, key_held

MAX_FORM_BYTES = 16 * 1024

Form = dict[str, str]
Endpoint = Callable[[Request], Awaitable[Response]]
Act = Callable[[Dashboard, str, str, Form], Awaitable[str]]
"""Does the act with (dashboard, actor, reason, the form's fields) and returns the URL to go
back to; raises ControlRefused (409) or ValidationError (400) having changed nothing."""


def refuse(board: Dashboard, request: Request, status: int, title: str, message: str) -> HTMLResponse:
    return board.render(request, "message.html", {"title": title, "message": message}, status=status)


async def _form(request: Request, max_bytes: int) -> Form | None:
    body = await request.body()
    if len(body) > max_bytes:
        return None
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


async def run_act(request: Request, act: Act, max_form_bytes: int = MAX_FORM_BYTES) -> Response:
    """Runs `act` once the request passed every rule an act must: the dashboard takes acts, the
    form is at most `max_form_bytes` and carries the session's CSRF token and a reason."""
    board = dashboard_of(request)
    if board.read_only:
        return refuse(board, request, 403, "Read-only", "this dashboard is read-only: it takes no actions")
    form = await _form(request, max_form_bytes)
    if form is None:
        return refuse(
            board,
            request,
            413,
            "Too large",
            f"the form is too large (over {max_form_bytes // 1024} KiB as sent); nothing was changed",
        )
    if not csrf_matches(request.cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)):
        return refuse(
            board, request, 403, "Refused", "the form's security token is missing or wrong: reload the page"
        )
    if not form.get("reason", "").strip():
        return refuse(board, request, 400, "A reason is needed", "give a reason: it goes into the audit log")
    actor = f"dashboard:{getattr(request.state, 'user', LOCAL_USER)}"
    try:
        back = await act(board, actor, check_reason(form["reason"], "act"), form)
    except ControlRefused as exc:
        return refuse(board, request, 409, "Refused", str(exc))
    except psycopg.errors.UniqueViolation as exc:
        return refuse(board, request, 409, "Refused", str(key_held(exc, "changed")))
    except (psycopg.errors.ReadOnlySqlTransaction, DatabaseUnavailable) as exc:
        read_only = isinstance(exc, psycopg.errors.ReadOnlySqlTransaction) or isinstance(
            exc.__cause__, psycopg.errors.ReadOnlySqlTransaction
        )
        if not read_only:
            raise
        return refuse(
            board,
            request,
            503,
            "Database read-only",
            "the database takes no writes now (a standby, or a read-only setting during maintenance); "
            "nothing was changed: try again once it is writable",
        )
    except psycopg.errors.InsufficientPrivilege:
        return refuse(
            board,
            request,
            403,
            "Not allowed",
            "the dashboard's database role may not do this (see docs/security.md for the operator "
            "role); nothing was changed",
        )
    except ValidationError as exc:
        return refuse(board, request, 400, "Not valid", str(exc))
    return RedirectResponse(back, status_code=303)


def job_url(request: Request, job_id: int, done: str) -> str:
    return f"{request.url_for('job', job_id=job_id)}?done={done}"


Target = TypeVar("Target", contravariant=True)
Subject = TypeVar("Subject")


class Verb(Protocol[Target]):
    """One of the client's verbs as its method (Client.retry, Client.pause_queue, ...): what it
    acts on, then the reason and the actor."""

    def __call__(
        self, client: Client, target: Target, /, *, reason: str, actor: str
    ) -> Awaitable[object]: ...


async def _client_act(request: Request, verb: Verb[Subject], target: Subject, back: str) -> Response:
    """Runs `verb` on `target` as the act, then goes to `back`."""

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        await verb(board.client, target, reason=reason, actor=actor)
        return back

    return await run_act(request, act)


def job_act(verb: Verb[Sequence[int]], done: str) -> Endpoint:
    """The endpoint that runs `verb` on the job its path names, then shows the job's page saying
    `done`."""

    async def on_job(request: Request) -> Response:
        job_id = int(request.path_params["job_id"])
        return await _client_act(request, verb, [job_id], job_url(request, job_id, done))

    return on_job


def queue_act(verb: Verb[str]) -> Endpoint:
    """The endpoint that runs `verb` on the queue its path names, then shows the overview."""

    async def on_queue(request: Request) -> Response:
        return await _client_act(
            request, verb, request.path_params["queue"], str(request.url_for("overview"))
        )

    return on_queue


retry_job = job_act(Client.retry, "retried")
cancel_job = job_act(Client.cancel, "cancelled")
#: Revokes a running job's lease and sends it back to run again at once, under a new token: for a
#: job stuck on a sick worker.
requeue_job = job_act(partial(Client.cancel, requeue=True), "requeued")
pause_queue = queue_act(Client.pause_queue)
resume_queue = queue_act(Client.resume_queue)


async def skip_ordering_head(request: Request) -> Response:
    job_id = int(request.path_params["job_id"])

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        async with board.pool.connection() as conn:
            skipped = await board.ordering.skip(conn, job_id, actor=actor, reason=reason)
        if skipped is None:
            raise ControlRefused(
                f"job {job_id} is not a dead, pending or scheduled job with an ordering key (it may "
                "have changed since the page was drawn); nothing was skipped"
            )
        return job_url(request, job_id, "skipped")

    return await run_act(request, act)

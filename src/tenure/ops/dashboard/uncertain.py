"""Uncertain effects: side effects whose attempt ended without saying whether they happened,
and the operator's verdict on each."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tenure.model.errors import ValidationError
from tenure.ops.dashboard.actions import Form, job_url, run_act
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.producer.control import ControlRefused

LISTED = 200
VERDICTS = {"done": "it happened", "not_happened": "it did not happen"}


async def effects_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    async with board.pool.connection() as conn:
        effects = await board.effects.list(conn, state="uncertain", limit=LISTED)
    return board.render(request, "effects.html", {"effects": effects, "limit": LISTED})


async def resolve_effect(request: Request) -> Response:
    effect_id = int(request.path_params["effect_id"])

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        verdict = form.get("verdict", "")
        if verdict not in VERDICTS:
            raise ValidationError("say whether the effect happened: verdict done or not_happened")
        async with board.pool.connection() as conn:
            resolved = await board.effects.resolve(
                conn, effect_id=effect_id, state=verdict, actor=actor, reason=reason
            )
        if resolved is None:
            raise ControlRefused(
                f"effect {effect_id} is not uncertain now (resolved by someone else, or its job is "
                "running again); nothing was changed"
            )
        return job_url(request, resolved.job_id, f"effect_{verdict}")

    return await run_act(request, act)

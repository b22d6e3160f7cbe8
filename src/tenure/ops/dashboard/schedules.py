"""Schedules: each one's cron, last and next fire and recent fires; pause and resume."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tenure.ops.dashboard.actions import Form, run_act
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.ops.views.schedules import planned
from tenure.producer.control import ControlRefused

RECENT_FIRES = 5


async def schedules_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    async with board.pool.connection() as conn:
        rows = [planned(row) for row in await board.schedules.list_all(conn)]
        for row in rows:
            row["fires"] = await board.schedules.fires(conn, row["name"], limit=RECENT_FIRES)
    done = {"paused": "The schedule is paused.", "resumed": "The schedule fires again from its next slot."}
    return board.render(
        request, "schedules.html", {"schedules": rows, "done": done.get(request.query_params.get("done", ""))}
    )


async def pause_schedule(request: Request) -> Response:
    name = request.path_params["name"]

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        async with board.pool.connection() as conn:
            row = await board.schedules.pause(conn, name, actor=actor, reason=reason)
        if row is None:
            raise ControlRefused(f"there is no schedule {name!r}; nothing was paused")
        if row.outcome != "paused":
            raise ControlRefused(
                f"schedule {name!r} is already paused (by {row.paused_by}: {row.pause_reason}); "
                "nothing was changed"
            )
        return f"{request.url_for('schedules')}?done=paused"

    return await run_act(request, act)


async def resume_schedule(request: Request) -> Response:
    name = request.path_params["name"]

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        async with board.pool.connection() as conn:
            row = await board.schedules.resume(conn, name, actor=actor, reason=reason)
        if row is None:
            raise ControlRefused(f"there is no schedule {name!r}; nothing was resumed")
        if row.outcome != "resumed":
            raise ControlRefused(f"schedule {name!r} is not paused; nothing was changed")
        return f"{request.url_for('schedules')}?done=resumed"

    return await run_act(request, act)

"""Schedules: each one's cron, last and next fire and recent fires; pause and resume."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tenure.db.schedule_queries import SchedulePause, ScheduleResume
from tenure.ops.dashboard.actions import Form, run_act
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.ops.views.schedules import planned, refusal
from tenure.producer.control import ControlRefused

RECENT_FIRES = 5


async def schedules_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    async with board.pool.connection() as conn:
        listed = [planned(row) for row in await board.schedules.list_all(conn)]
        rows = [(p, await board.schedules.fires(conn, p.schedule.name, limit=RECENT_FIRES)) for p in listed]
    done = {"paused": "The schedule is paused.", "resumed": "The schedule fires again from its next slot."}
    return board.render(
        request, "schedules.html", {"schedules": rows, "done": done.get(request.query_params.get("done", ""))}
    )


async def _change_schedule(request: Request, verb: str) -> Response:
    """Pauses or resumes (`verb`) the schedule the path names, and goes back to the schedules."""
    name = request.path_params["name"]

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        change: SchedulePause | ScheduleResume | None
        async with board.pool.connection() as conn:
            if verb == "pause":
                change = await board.schedules.pause(conn, name, actor=actor, reason=reason)
            else:
                change = await board.schedules.resume(conn, name, actor=actor, reason=reason)
        if change is None:
            raise ControlRefused(f"there is no schedule {name!r}; nothing was {verb}d")
        if refused := refusal(name, change):
            raise ControlRefused(refused)
        return f"{request.url_for('schedules')}?done={verb}d"

    return await run_act(request, act)


async def pause_schedule(request: Request) -> Response:
    return await _change_schedule(request, "pause")


async def resume_schedule(request: Request) -> Response:
    return await _change_schedule(request, "resume")

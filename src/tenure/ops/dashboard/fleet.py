"""The fleet: every registered worker with its load and failing services, and the global limits
the workers declared, with the slots in use now."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse

from tenure.ops.dashboard.state import dashboard_of


async def workers_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    async with board.pool.connection() as conn:
        workers = await board.ops.worker_list(conn)
    return board.render(request, "workers.html", {"workers": workers})


async def limits_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    async with board.pool.connection() as conn:
        limits = await board.control.limits(conn)
    return board.render(request, "limits.html", {"limits": limits})

"""Ordering keys held up by a dead job: what waits behind each, and the two ways on, skip
the head or reprocess it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse

from tenure.ops.dashboard.state import dashboard_of

LISTED = 200


async def ordering_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    async with board.pool.connection() as conn:
        blocked = await board.ordering.blocked(conn, limit=LISTED)
    return board.render(request, "ordering.html", {"blocked": blocked, "limit": LISTED})

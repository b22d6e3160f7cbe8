"""The login form for a dashboard behind a token: it stores the token in an HttpOnly cookie."""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from tenure.ops.dashboard.security import CSRF_COOKIE, CSRF_FIELD, TOKEN_COOKIE, csrf_matches
from tenure.ops.dashboard.state import dashboard_of

MAX_LOGIN_BYTES = 4096


async def login_form(request: Request) -> HTMLResponse:
    return dashboard_of(request).render(request, "login.html", {"error": None})


async def login_submit(request: Request) -> Response:
    board = dashboard_of(request)
    body = await request.body()
    fields = parse_qs(body[:MAX_LOGIN_BYTES].decode("utf-8", "replace"))
    token = fields.get("token", [""])[0]
    if not csrf_matches(request.cookies.get(CSRF_COOKIE), fields.get(CSRF_FIELD, [""])[0]):
        # A login forged from another site would sign the browser in as someone else.
        error = "the form's security token is missing or wrong: reload the page"
        return board.render(request, "login.html", {"error": error}, status=403)
    authenticate = request.app.state.authenticate
    # Judge the token exactly as later requests will be judged: as the cookie it becomes.
    probe = Request({**request.scope, "headers": [(b"cookie", f"{TOKEN_COOKIE}={token}".encode())]})
    if authenticate is None or not token or authenticate(probe) is None:
        return board.render(request, "login.html", {"error": "that token is not valid"}, status=401)
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    response.set_cookie(
        TOKEN_COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/"
    )
    return response

"""Who may use the dashboard, forged-request protection and the headers every response carries."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Returns the user's name for a request it lets in, or None to answer 401.
Authenticator = Callable[[Request], str | None]

TOKEN_COOKIE = "tenure_token"
CSRF_COOKIE = "tenure_csrf"
CSRF_FIELD = "csrf"
LOCAL_USER = "local"

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def token_auth(token: str, user: str = "token") -> Authenticator:
    """Lets in requests bearing `token` as `Authorization: Bearer` or in the login cookie."""
    if not token:
        raise ValueError("the dashboard token must not be empty")
    expected = token.encode()

    def authenticate(request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(TOKEN_COOKIE, "")
        return user if hmac.compare_digest(given.encode(), expected) else None

    return authenticate


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_matches(cookie: str | None, field: str | None) -> bool:
    """True when the form carries the session's token; both must be present."""
    if not cookie or not field:
        return False
    return hmac.compare_digest(cookie.encode(), field.encode())


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response, errors and static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    h for h in SECURITY_HEADERS if h[0] not in names
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)

"""Who may use the dashboard, forged-request protection and the headers every response carries."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Callable, Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse
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


#: Methods that only read: every other one is an act, and must come from the dashboard's own pages.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: What a browser says of a request its user made from the dashboard's own page, or typed in.
SAME_ORIGIN_SITES = frozenset({"same-origin", "none"})


def host_name(host: str) -> str | None:
    """The name in a Host header, without its port or brackets, lower case; None when malformed."""
    host = host.strip().lower()
    if host.startswith("["):
        name, closed, rest = host[1:].partition("]")
        if not closed:
            return None
    else:
        name, colon, port = host.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    return name or None


def is_loopback_host(host: str) -> bool:
    """True when a Host header names this machine by a loopback name: localhost, 127.x.x.x or
    [::1], with or without a port. A page elsewhere that points its own DNS name at 127.0.0.1
    still sends its own name, so it never passes."""
    name = host_name(host)
    if name is None:
        return False
    if name == "localhost":
        return True
    try:
        # "127.1" is not an address here: a browser would look it up as a name.
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cross_origin(headers: Headers) -> str | None:
    """Why an act did not come from the dashboard's own pages, or None when it did. A browser says
    where a request comes from: Sec-Fetch-Site, else Origin (which every browser sends on a form
    POST), compared with the host the request came to. A request with neither is refused too: the
    CSRF pair alone proves nothing, since a page on another port of the same machine can set the
    cookie it is compared with; a script sends Origin, or uses the tenure CLI."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        if site.strip().lower() in SAME_ORIGIN_SITES:
            return None
        return "the browser says this form was sent from another site"
    origin = headers.get("origin")
    if origin is None:
        return (
            "the request says neither where it was sent from (no Origin, no Sec-Fetch-Site, which every "
            "browser sends on a form); a script sends Origin with the dashboard's own address, or uses "
            "the tenure CLI"
        )
    if origin.strip().lower() == "null":
        return "the browser sent this form from a page with no origin (a sandboxed frame or a file)"
    try:
        netloc = urlsplit(origin.strip()).netloc.lower()
    except ValueError:
        netloc = ""
    if not netloc or netloc != headers.get("host", "").strip().lower():
        return "the browser says this form was sent from another site"
    return None


class SameOrigin:
    """Refuses a request naming a host the dashboard does not answer to (DNS rebinding), and an
    act sent from another site's page (cross-site request forgery), before anything else runs.

    With `loopback_only`, the Host header must name a loopback address or one of `hosts` (names
    without port; "*" lets any through).
    """

    def __init__(self, app: ASGIApp, *, loopback_only: bool, hosts: Collection[str] = ()) -> None:
        self.app = app
        self.loopback_only = loopback_only and "*" not in hosts
        self.hosts = frozenset(h.lower() for h in hosts)

    def host_allowed(self, host: str | None) -> bool:
        if not self.loopback_only:
            return True
        if host is None:
            return False
        return is_loopback_host(host) or host_name(host) in self.hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal: PlainTextResponse | None = None
        if not self.host_allowed(headers.get("host")):
            refusal = PlainTextResponse(
                "Refused: this dashboard has no token, so it answers only to the loopback names "
                "localhost, 127.0.0.1 and [::1], and this request named another host (a web page "
                "can do that by pointing its own name at 127.0.0.1). Open it as http://127.0.0.1:<port>/, "
                "or set TENURE_DASHBOARD_TOKEN to serve it under other names.\n",
                status_code=400,
            )
        elif scope["method"] not in SAFE_METHODS:
            reason = cross_origin(headers)
            if reason is not None:
                refusal = PlainTextResponse(
                    f"Refused: {reason}; the dashboard takes acts only from its own pages. Nothing "
                    "was changed: open the dashboard itself and act from there.\n",
                    status_code=403,
                )
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

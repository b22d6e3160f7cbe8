"""The dashboard's ASGI app: mount it in any Starlette or FastAPI app, or serve it alone."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Collection

import psycopg
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from tenure.model.errors import ConfigurationError, DatabaseUnavailable, SchemaNotMigrated
from tenure.model.validation import check_schema_name
from tenure.ops.dashboard import (
    actions,
    blocked,
    dead,
    fleet,
    jobs,
    login,
    overview,
    schedules,
    uncertain,
    waits,
    workflows,
)
from tenure.ops.dashboard.security import LOCAL_USER, Authenticator, SameOrigin, SecurityHeaders
from tenure.ops.dashboard.state import Dashboard

log = logging.getLogger("tenure.dashboard")
#: What a page meets while the server restarts, fails over or cannot be reached.
DATABASE_DOWN = (DatabaseUnavailable, psycopg.OperationalError, PoolTimeout)

#: Paths a browser reaches before it has logged in.
_OPEN_PATHS = ("/login", "/static/")


class RequireLogin(BaseHTTPMiddleware):
    """Answers 401 (with the login form) to a request the authenticator does not let in; opens
    the database pool first, as every page and the 401 page need it."""

    def __init__(self, app: ASGIApp, authenticate: Authenticator | None) -> None:
        super().__init__(app)
        self.authenticate = authenticate

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        board: Dashboard = request.app.state.dashboard
        try:
            await board.ensure_open()
            return await self._let_in(board, request, call_next)
        except SchemaNotMigrated as exc:
            # A schema behind this version (an upgrade not yet run, or running): say what to run;
            # the next page checks again.
            message = {"title": "Schema not up to date", "message": str(exc)}
            return board.render(request, "message.html", message, status=503)
        except ConfigurationError as exc:
            # Settings the database cannot work with (prepared statements through a pooler that
            # loses them): the message names the fix.
            message = {"title": "Cannot use this database", "message": str(exc)}
            return board.render(request, "message.html", message, status=503)
        except DATABASE_DOWN as exc:
            # A restart or failover in progress: say so and keep serving; the next page retries.
            log.warning("dashboard: the database is unavailable (%s)", type(exc).__name__)
            message = {
                "title": "Database unavailable",
                "message": f"the database {board.describe()} does not answer now; this page works "
                "again as soon as it does (a restart or failover in progress?)",
            }
            return board.render(request, "message.html", message, status=503)
        except psycopg.Error as exc:
            # Anything else the server says (a timeout, a lock wait cut short): a page that says
            # what happened, and the service goes on.
            log.warning("dashboard: the database refused a page (%s)", exc.sqlstate or type(exc).__name__)
            message = {
                "title": "The database refused",
                "message": f"the database answered {exc.sqlstate or 'an error'} "
                f"({type(exc).__name__}); nothing was changed: try again",
            }
            return board.render(request, "message.html", message, status=503)

    async def _let_in(
        self, board: Dashboard, request: Request, call_next: RequestResponseEndpoint
    ) -> Response:
        if self.authenticate is None:
            request.state.user = LOCAL_USER
            return await call_next(request)
        if request.url.path.removeprefix(request.scope.get("root_path", "")).startswith(_OPEN_PATHS):
            return await call_next(request)
        user = self.authenticate(request)
        if user is None:
            return board.render(request, "login.html", {"error": None}, status=401)
        request.state.user = user
        return await call_next(request)


def create_app(
    dsn: str | None = None,
    schema: str = "tenure",
    read_only: bool = False,
    auth: Authenticator | None = None,
    hosts: Collection[str] = (),
) -> Starlette:
    """The dashboard over `dsn` (default $TENURE_DSN, else the embedded server).

    `auth` decides who is let in (see `token_auth`); None lets everyone in, which is right only
    on a loopback address. Without `auth`, a request must name a loopback host (localhost,
    127.x.x.x, [::1]) or one of `hosts` in its Host header: any web page can point a name of its
    own at 127.0.0.1 and read the answers. Give `hosts` the names a host app that authenticates
    before the mount is reached by ("*": any). Every POST must come from the dashboard's own
    pages, with `auth` or without. With `read_only`, no action is shown or accepted.
    """
    board = Dashboard(dsn=dsn, schema=check_schema_name(schema), read_only=read_only)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await board.ensure_open()
        except (*DATABASE_DOWN, ConfigurationError, SchemaNotMigrated) as exc:
            # Serve anyway: each page says what is wrong (the database does not answer, the
            # schema is behind) until it is mended.
            log.warning("dashboard: starting while the database cannot be used (%s)", exc)
        try:
            yield
        finally:
            await board.close()

    routes = [
        Route("/", overview.overview_page, name="overview"),
        Route("/overview/live", overview.overview_fragment, name="overview_live"),
        Route("/jobs", jobs.jobs_page, name="jobs"),
        Route("/jobs/{job_id:int}", jobs.job_page, name="job"),
        Route("/jobs/{job_id:int}/retry", actions.retry_job, methods=["POST"], name="job_retry"),
        Route("/jobs/{job_id:int}/cancel", actions.cancel_job, methods=["POST"], name="job_cancel"),
        Route("/jobs/{job_id:int}/requeue", actions.requeue_job, methods=["POST"], name="job_requeue"),
        Route("/jobs/{job_id:int}/skip", actions.skip_ordering_head, methods=["POST"], name="job_skip"),
        Route("/jobs/{job_id:int}/end-wait", waits.end_wait, methods=["POST"], name="job_end_wait"),
        Route("/jobs/{job_id:int}/signal", waits.send_signal, methods=["POST"], name="job_signal"),
        Route("/dead", dead.dead_page, name="dead"),
        Route("/dead/reprocess", dead.reprocess_matching, methods=["POST"], name="dead_reprocess"),
        Route("/effects", uncertain.effects_page, name="effects"),
        Route(
            "/effects/{effect_id:int}/resolve",
            uncertain.resolve_effect,
            methods=["POST"],
            name="effect_resolve",
        ),
        Route("/ordering", blocked.ordering_page, name="ordering"),
        Route("/workflows", workflows.workflows_page, name="workflows"),
        Route("/workflows/{workflow_id:int}", workflows.workflow_page, name="workflow"),
        Route(
            "/workflows/{workflow_id:int}/cancel",
            workflows.cancel_workflow,
            methods=["POST"],
            name="workflow_cancel",
        ),
        Route(
            "/workflows/{workflow_id:int}/retry",
            workflows.retry_workflow,
            methods=["POST"],
            name="workflow_retry",
        ),
        Route("/schedules", schedules.schedules_page, name="schedules"),
        Route("/schedules/{name}/pause", schedules.pause_schedule, methods=["POST"], name="schedule_pause"),
        Route(
            "/schedules/{name}/resume", schedules.resume_schedule, methods=["POST"], name="schedule_resume"
        ),
        Route("/limits", fleet.limits_page, name="limits"),
        Route("/workers", fleet.workers_page, name="workers"),
        Route("/queues/{queue}/pause", actions.pause_queue, methods=["POST"], name="queue_pause"),
        Route("/queues/{queue}/resume", actions.resume_queue, methods=["POST"], name="queue_resume"),
        Route("/login", login.login_form, name="login"),
        Route("/login", login.login_submit, methods=["POST"], name="login_submit"),
        Mount("/static", StaticFiles(packages=[("tenure.ops.dashboard", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(
                SameOrigin,
                loopback_only=auth is None,
                hosts=(hosts,) if isinstance(hosts, str) else tuple(hosts),
            ),
            Middleware(RequireLogin, authenticate=auth),
        ],
    )
    app.state.dashboard = board
    app.state.authenticate = auth
    return app

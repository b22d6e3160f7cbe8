"""What every page of one dashboard shares: its database pool, client, queries and templates."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jinja2
from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import HTMLResponse

from tenure.db.connect import describe_dsn, resolve_dsn
from tenure.db.control_queries import ControlQueries
from tenure.db.effects_queries import EffectQueries
from tenure.db.migrate import require_current_schema
from tenure.db.ops_queries import OpsQueries
from tenure.db.ordering_queries import OrderingQueries
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.db.schedule_queries import ScheduleQueries
from tenure.db.wait_queries import WaitQueries
from tenure.ops.dashboard.queries import DashboardQueries
from tenure.ops.dashboard.security import CSRF_COOKIE, LOCAL_USER, new_csrf_token
from tenure.ops.views.durations import human
from tenure.producer.client import Client

#: Seconds between the overview's refreshes.
REFRESH_SECONDS = 5
#: Seconds a page waits for a database connection before it says the database is unavailable.
POOL_TIMEOUT = 5.0


def _when(at: datetime | None) -> str:
    return "—" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(seconds: float | None) -> str:
    return "—" if seconds is None else human(seconds)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tenure.ops.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = _when
    env.filters["age"] = _age
    return env


@dataclass
class Dashboard:
    dsn: str | None
    schema: str
    read_only: bool
    queries: Queries = field(init=False)
    ops: OpsQueries = field(init=False)
    effects: EffectQueries = field(init=False)
    ordering: OrderingQueries = field(init=False)
    schedules: ScheduleQueries = field(init=False)
    control: ControlQueries = field(init=False)
    waits: WaitQueries = field(init=False)
    pages: DashboardQueries = field(init=False)
    templates: jinja2.Environment = field(default_factory=_environment)
    _pool: AsyncConnectionPool[Any] | None = None
    _client: Client | None = None
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.queries = Queries(self.schema)
        self.ops = OpsQueries(self.schema)
        self.effects = EffectQueries(self.schema)
        self.ordering = OrderingQueries(self.schema)
        self.schedules = ScheduleQueries(self.schema)
        self.control = ControlQueries(self.schema)
        self.waits = WaitQueries(self.schema)
        self.pages = DashboardQueries(self.schema)

    async def ensure_open(self) -> None:
        """Opens the pool on first use: a host app that mounts the dashboard need not run its
        lifespan (Starlette does not run a mounted app's), though it should, to close the pool."""
        if self._pool is None:
            async with self._opening:
                if self._pool is None:
                    await self.open()

    async def open(self) -> None:
        # Small: the dashboard reads a few rows per page, and must not crowd the workers out.
        # Checked on lending: the dashboard sits idle for hours, and a page must not be the one
        # to discover that the server restarted since.
        self._pool = await open_pool(
            resolve_dsn(self.dsn).dsn,
            min_size=1,
            max_size=4,
            name="tenure-dashboard",
            timeout=POOL_TIMEOUT,
            check=True,
        )
        try:
            async with self._pool.connection() as conn:
                await require_current_schema(conn, self.schema)
        except BaseException:
            # Not opened: the next page checks again (an upgrade may have run meanwhile).
            await self._pool.close()
            self._pool = None
            raise
        self._client = Client(schema=self.schema, pool=self._pool)

    def describe(self) -> str:
        """The database, without its password, for messages."""
        return describe_dsn(self.dsn) if self.dsn else "(the default)"

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
            self._client = None

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        if self._pool is None:
            raise RuntimeError("the dashboard is not open: run it inside its app's lifespan")
        return self._pool

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the dashboard is not open: run it inside its app's lifespan")
        return self._client

    def render(self, request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
        """The template with what every page needs; gives the browser a CSRF token if it has none."""
        token = request.cookies.get(CSRF_COOKIE)
        fresh = token is None
        if token is None:
            token = new_csrf_token()
        html = self.templates.get_template(name).render(
            request=request,
            url_for=request.url_for,
            csrf_token=token,
            read_only=self.read_only,
            user=getattr(request.state, "user", LOCAL_USER),
            refresh_seconds=REFRESH_SECONDS,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if fresh:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
        return response


def dashboard_of(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.dashboard
    return board

"""The soak's operator at the dashboard: reads every page throughout the load and its faults (a
server restart, the database read-only, sessions killed), and acts through it (the queue's pause
and a revoke), as a person at the browser would. What a page answered is checked afterwards: a
page or an honest 503, never an error, and every page once the faults are over."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections import Counter

import httpx

from tenure.lab.soak.app import QUEUE as SOAK_QUEUE
from tenure.ops.dashboard import create_app
from tenure.ops.demo.report import Invariant as Check

PAGES = (
    "/",
    "/overview/live",
    "/jobs",
    "/jobs?state=running",
    f'/jobs?payload={{"source": 3}}&queue={SOAK_QUEUE}',
    "/dead",
    "/effects",
    "/ordering",
    "/schedules",
    "/limits",
    "/workers",
)
#: Answers a page may give while a fault is on: the page, or 503 (database restarting or read-only).
HONEST = frozenset({200, 503})
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
JOB_LINK = re.compile(r'href="[^"]*/jobs/(\d+)"')
#: Each page waits at most this long: a restart's pool timeout (5 s) plus rendering.
REQUEST_TIMEOUT = 30.0
DASHBOARD_ORIGIN = "http://127.0.0.1"


class DashboardOperator:
    def __init__(self, dsn: str, schema: str) -> None:
        self.app = create_app(dsn, schema=schema)
        # A browser on the dashboard's own pages sends their Origin with every act; the dashboard
        # refuses an act that carries neither Origin nor Sec-Fetch-Site.
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url=DASHBOARD_ORIGIN,
            headers={"origin": DASHBOARD_ORIGIN},
            timeout=REQUEST_TIMEOUT,
        )
        self.answers: Counter[int] = Counter()
        self.unexpected: list[str] = []
        self.acts: Counter[str] = Counter()
        self.final: dict[str, int] = {}
        self._rng = random.Random(7)
        #: Jobs the lists linked to: a job's page is read only for a job that exists (the soak
        #: deletes none).
        self._seen: set[int] = set()
        #: Jobs whose pages a fault reads and judges itself (the rows it injected).
        self.avoid: set[int] = set()

    async def _get(self, path: str) -> int:
        try:
            response = await self.http.get(path)
        except Exception as exc:  # the app raised instead of answering: exactly what must not happen
            self.unexpected.append(f"GET {path}: {type(exc).__name__}: {exc}"[:300])
            return 0
        self.answers[response.status_code] += 1
        if response.status_code not in HONEST:
            self.unexpected.append(f"GET {path}: HTTP {response.status_code}")
        elif path.startswith("/jobs") and response.status_code == 200:
            self._seen.update(int(n) for n in JOB_LINK.findall(response.text))
        return response.status_code

    async def watch(
        self, stop: asyncio.Event, ready: asyncio.Event | None = None, every: float = 1.0
    ) -> None:
        """Reads the pages in turn, and the page of a job a list showed, until `stop` is set;
        from when `ready` is set (the dashboard needs the latest schema, which the soak's
        upgrade brings)."""
        if ready is not None:
            waits = [asyncio.create_task(ready.wait()), asyncio.create_task(stop.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()
        n = 0
        while not stop.is_set():
            await self._get(PAGES[n % len(PAGES)])
            if n % 5 == 0 and (readable := sorted(self._seen - self.avoid)):
                await self._get(f"/jobs/{self._rng.choice(readable)}")
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every)

    async def final_round(self) -> None:
        """Every page once, after the faults: each must render."""
        for path in PAGES:
            self.final[path] = await self._get(path)

    async def act(self, path: str, **fields: str) -> int:
        """POSTs a form the way the browser does: the CSRF token from a page, and a reason.
        303: done; 409: refused because the job or queue changed meanwhile; 503: database down."""
        try:
            token = CSRF.search((await self.http.get("/")).text)
            data = {"csrf": token.group(1) if token else "", **fields}
            response = await self.http.post(path, data=data)
        except Exception as exc:
            self.unexpected.append(f"POST {path}: {type(exc).__name__}: {exc}"[:300])
            return 0
        self.acts[str(response.status_code)] += 1
        if response.status_code not in (303, 409, 503):
            self.unexpected.append(f"POST {path}: HTTP {response.status_code}")
        return response.status_code

    async def probe(
        self, method: str, path: str, headers: dict[str, str] | None = None, **fields: str
    ) -> str:
        """One request judged by the fault that makes it, not counted with the operator's own:
        its status, or the exception the app raised instead of answering. A POST carries the
        dashboard's CSRF token and `fields`, as the browser's form would."""
        try:
            if method == "GET":
                response = await self.http.get(path, headers=headers)
            else:
                token = CSRF.search((await self.http.get("/")).text)
                data = {"csrf": token.group(1) if token else "", **fields}
                response = await self.http.post(path, data=data, headers=headers)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:200]
        return str(response.status_code)

    async def close(self) -> None:
        await self.http.aclose()
        await self.app.state.dashboard.close()

    def checks(self) -> list[Check]:
        served = ", ".join(f"{n} x {code}" for code, n in sorted(self.answers.items()))
        broken = [p for p, code in self.final.items() if code != 200]
        acts = ", ".join(f"{n} x {code}" for code, n in sorted(self.acts.items())) or "none"
        return [
            Check(
                "the dashboard answered every request through the faults with a page or a 503",
                not self.unexpected and sum(self.answers.values()) > 0,
                "; ".join(self.unexpected[:3]) or f"{served}",
            ),
            Check(
                "every dashboard page rendered once the faults were over",
                bool(self.final) and not broken,
                ", ".join(broken) or f"{len(self.final)} pages",
            ),
            Check(
                "the operator's acts through the dashboard landed or were refused cleanly",
                sum(self.acts.values()) > 0 and not any(u.startswith("POST") for u in self.unexpected),
                f"answers {acts}",
            ),
        ]


def act_outcome(status: int) -> str:
    return {303: "done", 409: "refused (changed meanwhile)", 503: "database unavailable"}.get(
        status, f"HTTP {status}"
    )

"""The overview: every queue's counts, pauses and limits, the workers, and what `tenure check` flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from tenure.model.jobs import JobState
from tenure.ops.dashboard.chart import MINUTES, throughput_chart, trouble_chart
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.ops.views.health import Report, problems

STATES = [s.value for s in JobState]
#: States the overview counts over the charts' window only: their history grows without bound
#: (10M succeeded jobs took a second and a half to count, every 5 s for every open tab), while
#: the other states are read exactly through their partial indexes, as the gauges do.
RECENT_ONLY = ("succeeded", "cancelled")
#: The thresholds `tenure check` uses when given no options, and jobs no live worker can run
#: (`tenure check --max-jobs-without-worker 0`): a job of a task no worker registers never runs.
CHECK_DEFAULTS = argparse.Namespace(
    queue=None,
    max_claimable_age=300.0,
    max_paused_age=None,
    max_dead=None,
    max_dead_age=None,
    max_stale_workers=None,
    max_failing_workers=0,
    stale_after=60.0,
    allow_unprotected_commits=False,
    max_jobs_without_worker=0,
)


@dataclass(frozen=True)
class QueueRow:
    name: str
    counts: dict[str, int]
    oldest_claimable_age: float | None
    leases_near_expiry: int
    pause: dict[str, Any] | None
    limit: dict[str, Any] | None


async def overview_context(board: Dashboard) -> dict[str, Any]:
    async with board.pool.connection() as conn:
        async with board.ops.snapshot(conn):
            snapshot = await board.ops.read_gauges(conn, stale_seconds=CHECK_DEFAULTS.stale_after)
        workers = await board.ops.worker_list(conn)
        finished = await board.ops.finished_recent(conn, minutes=MINUTES)
        trouble = await board.pages.trouble_recent(conn, minutes=MINUTES)
    gauges = {g.queue: g for g in snapshot.queues}
    recent: dict[str, dict[str, int]] = {}
    for r in finished:
        by_state = recent.setdefault(r.queue, {})
        by_state[r.state] = by_state.get(r.state, 0) + r.jobs
    pauses = {p["queue"]: p for p in snapshot.paused}
    limits = {lim["queue"]: lim for lim in snapshot.limits}
    rows = []
    for name in sorted(set(gauges) | set(recent) | set(pauses) | set(limits)):
        gauge = gauges.get(name)
        counts = {s: recent.get(name, {}).get(s, 0) for s in RECENT_ONLY}
        if gauge is not None:
            counts.update(
                scheduled=gauge.scheduled,
                pending=gauge.pending,
                running=gauge.running,
                waiting=gauge.waiting,
                dead=gauge.dead,
            )
        rows.append(
            QueueRow(
                name=name,
                counts={s: counts.get(s, 0) for s in STATES},
                oldest_claimable_age=gauge.oldest_claimable_age
                if gauge and gauge.oldest_claimable_at
                else None,
                leases_near_expiry=gauge.leases_near_expiry if gauge else 0,
                pause=pauses.get(name),
                limit=limits.get(name),
            )
        )
    return {
        "states": STATES,
        "recent_only": RECENT_ONLY,
        "queues": rows,
        "workers": workers,
        "worker_gauges": snapshot.workers,
        "chart": throughput_chart(finished),
        "trouble": trouble_chart(trouble),
        "problems": problems(Report(snapshot, [], workers), CHECK_DEFAULTS),
    }


async def overview_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    return board.render(request, "overview.html", await overview_context(board))


async def overview_fragment(request: Request) -> HTMLResponse:
    """The overview's live part alone, which the page fetches every few seconds."""
    board = dashboard_of(request)
    return board.render(request, "_overview.html", await overview_context(board))

"""The app that real worker processes run in X4: external calls to a test destination over HTTP.

Attempt 1 (token 1) of each task makes its external call, leaves the marker `called-1`, and hangs
until the test kills the worker: the crash lands after the call and before the job's completion.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

import tenure
from apps.boundary_app import hold, mark

app = tenure.Tenure()


def call(url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def crash_point(ctx: tenure.JobContext, marker_dir: str) -> None:
    mark(marker_dir, f"called-{ctx.token}", ctx)
    if ctx.token == 1:
        hold(marker_dir, ctx.token, 60.0)


@app.task(name="x4.idempotent_charge", max_attempts=5)
def idempotent_charge(ctx: tenure.JobContext, marker_dir: str, url: str, amount: int) -> None:
    """Calls an idempotent destination with the job's stable per-step key."""
    call(f"{url}/charge", {"amount": amount}, {"Idempotency-Key": ctx.step_key("charge")})
    crash_point(ctx, marker_dir)
    mark(marker_dir, f"finished-{ctx.token}", ctx)


@app.task(name="x4.ledger_send", max_attempts=5)
def ledger_send(ctx: tenure.JobContext, marker_dir: str, url: str, reconcile: bool) -> None:
    """Calls a destination without idempotency through the effect ledger."""

    def perform(key: str) -> Any:
        sent = call(f"{url}/send", {"ref": key})
        crash_point(ctx, marker_dir)
        return sent

    def look_up(record: tenure.EffectRecord) -> tenure.Confirmed | tenure.NotHappened:
        found = call(f"{url}/lookup?ref={urllib.parse.quote(record.key)}")
        return tenure.Confirmed(found) if found else tenure.NotHappened()

    ctx.effect_sync("send", perform=perform, reconcile=look_up if reconcile else None)
    mark(marker_dir, f"finished-{ctx.token}", ctx)

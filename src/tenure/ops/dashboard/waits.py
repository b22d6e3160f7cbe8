"""A job's waits on its page (what it waits for, since and until when, how each earlier wait
ended) and the two acts on a waiting job: end its wait, or send a signal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tenure.model.errors import ValidationError
from tenure.model.waits import MAX_SIGNAL_BYTES, WaitRecord
from tenure.ops.dashboard.actions import Form, job_url, run_act
from tenure.ops.dashboard.masking import masked_payload
from tenure.ops.dashboard.state import Dashboard
from tenure.ops.views.durations import relative
from tenure.ops.views.waits import wait_ending
from tenure.producer.control import ControlRefused

#: The signal form's body may carry a payload at its limit, each byte of it escaped as %XX by
#: the browser's form encoding, with room for the key, the reason and the rest.
MAX_SIGNAL_FORM_BYTES = 3 * MAX_SIGNAL_BYTES + 16 * 1024


@dataclass(frozen=True, slots=True)
class ShownWait:
    """One wait a job began, as its page shows it: times both absolute (`since`, ...) and
    relative to the database's clock (`since_ago`, ...)."""

    name: str
    key: str | None
    state: str
    how: str
    since: datetime
    since_ago: str
    deadline: datetime | None
    until: str
    resolved_at: datetime | None
    resolved_ago: str
    signal_id: int | None
    payload: str | None
    """The signal's payload as JSON, credential-looking values masked; None without a signal."""
    sent_by: str | None

    @property
    def awaited(self) -> str:
        return f"a signal to {self.key}" if self.key else "a time"


def shown_waits(waits: list[WaitRecord], now: datetime) -> list[ShownWait]:
    shown = []
    for w in waits:
        payload = None
        if w.signal_id is not None:
            payload = json.dumps(
                masked_payload(w.payload), indent=2, sort_keys=True, ensure_ascii=False, default=str
            )
        shown.append(
            ShownWait(
                name=w.name,
                key=w.key,
                state=w.state,
                how=wait_ending(w),
                since=w.since,
                since_ago=relative(w.since, now),
                deadline=w.deadline,
                until=relative(w.deadline, now) if w.deadline else "no deadline",
                resolved_at=w.resolved_at,
                resolved_ago=relative(w.resolved_at, now) if w.resolved_at else "",
                signal_id=w.signal_id,
                payload=payload,
                sent_by=w.sent_by,
            )
        )
    return shown


async def end_wait(request: Request) -> Response:
    """Ends the waiting job's wait: it is pending at once, and its handler's wait returns `ended`."""
    job_id = int(request.path_params["job_id"])

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        async with board.pool.connection() as conn:
            ended = await board.waits.end_wait(conn, job_id=job_id, actor=actor, reason=reason)
            if ended is None:
                job = await board.queries.job_get(conn, job_id)
                now = "does not exist" if job is None else f"is {job.state.value} now"
                raise ControlRefused(
                    f"job {job_id} {now}, not waiting (its wait may have ended since the page was "
                    "drawn: signalled, timed out or ended by someone else); nothing was ended"
                )
        return job_url(request, job_id, "wait_ended")

    return await run_act(request, act)


def _payload_of(form: Form) -> Any:
    """The form's payload as JSON; an empty one is JSON null, as `tenure signal` without --payload."""
    text = form.get("payload", "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"the payload is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            'write it like {"approved": true}; nothing was sent'
        ) from None
    except RecursionError:
        raise ValidationError("the payload is nested too deeply to read; nothing was sent") from None


async def send_signal(request: Request) -> Response:
    """Sends a signal from a waiting job's page, with the same checks as `app.signal`; the signal
    records the dashboard's actor as its sender, and the job it wakes at once records the reason."""
    job_id = int(request.path_params["job_id"])

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        payload = _payload_of(form)
        idempotency_key = form.get("idempotency_key", "").strip() or None
        async with board.pool.connection() as conn:
            sent = await board.client.signal(
                form.get("key", ""),
                payload,
                idempotency_key=idempotency_key,
                conn=conn,
                actor=actor,
                reason=reason,
            )
        if sent.outcome == "delivered" and sent.job_id is not None:
            return job_url(request, sent.job_id, "signal_delivered")
        return job_url(request, job_id, f"signal_{sent.outcome}")

    return await run_act(request, act, max_form_bytes=MAX_SIGNAL_FORM_BYTES)

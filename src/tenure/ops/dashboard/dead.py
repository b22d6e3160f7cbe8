"""Dead jobs: where they cluster, a filtered list, and reprocessing every job a filter matches,
with the count shown first and checked again when the act lands."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tenure.model.errors import ValidationError
from tenure.ops.dashboard.actions import Form, run_act
from tenure.ops.dashboard.filters import DEAD_FIELDS, BadFilter, dead_filter, form_of
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.producer.control import ControlRefused

LISTED = 100
#: The most one act reprocesses; beyond it, narrow the filter or use `tenure dead reprocess`.
MAX_BULK = 10_000


async def dead_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    form = form_of(request.query_params, DEAD_FIELDS)
    context: dict[str, Any] = {
        "form": form,
        "groups": [],
        "jobs": [],
        "matching": 0,
        "error": None,
        "max_bulk": MAX_BULK,
        "done": _done(request),
    }
    try:
        where = dead_filter(request.query_params)
    except BadFilter as exc:
        return board.render(request, "dead.html", {**context, "error": str(exc)}, status=400)
    async with board.pool.connection() as conn:
        groups = await board.pages.dead_by_error(conn)
        jobs = await board.ops.dead_search(conn, where, limit=LISTED)
        matching = await board.pages.dead_count(conn, where)
    context.update(groups=groups, jobs=jobs, matching=matching, filtered=not where.empty)
    return board.render(request, "dead.html", context)


def _done(request: Request) -> str | None:
    text = request.query_params.get("reprocessed", "")
    if not text.isdigit() or len(text) > 9:
        return None
    return f"{int(text)} dead job(s) are pending again, with their ids and history kept."


class _CountChanged(Exception):
    """Not as many dead jobs match as the page showed: the moves are to be rolled back."""


def _matching(count: int, expected: int) -> str:
    if count > MAX_BULK:
        return f"more than {MAX_BULK:,} dead jobs match"
    if count == expected:
        # Moved on again between the act and the count: say only that it moves.
        return "a changing number of dead jobs match"
    return f"{count:,} dead job matches" if count == 1 else f"{count:,} dead jobs match"


def _expected(form: Form) -> int:
    text = form.get("expect", "")
    if not text.isdigit() or len(text) > 9 or int(text) < 1:
        raise ValidationError("the form lacks the count it was shown: reload the page")
    return int(text)


def _attempts(form: Form) -> int:
    text = form.get("attempts", "1").strip() or "1"
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise ValidationError("attempts must be a whole number from 1 to 100")
    return int(text)


async def reprocess_matching(request: Request) -> Response:
    """Reprocesses every dead job the form's filter matches, provided exactly as many match now
    as the page showed: if others died or were reprocessed since, nothing is changed."""

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        try:
            where = dead_filter(form)
        except BadFilter as exc:
            raise ValidationError(str(exc)) from None
        expected = _expected(form)
        if expected > MAX_BULK:
            raise ValidationError(
                f"{expected} jobs is more than one act reprocesses ({MAX_BULK}): narrow the filter, or "
                "use `tenure dead reprocess` with --limit"
            )
        attempts = _attempts(form)
        moved: list[int] = []
        async with board.pool.connection() as conn:
            try:
                async with conn.transaction():
                    moved = await board.ops.dead_reprocess_many(
                        conn, where, actor=actor, reason=reason, attempts=attempts, limit=expected + 1
                    )
                    if len(moved) != expected:
                        # Raised inside the transaction, so the moves above are rolled back.
                        raise _CountChanged
            except _CountChanged:
                # Fewer than the limit: that is all of them. More: count again, once the moves are
                # undone, but no further than one act may move.
                matching = len(moved)
                if matching > expected:
                    matching = await board.pages.dead_count(conn, where, cap=MAX_BULK + 1)
                raise ControlRefused(
                    f"{_matching(matching, expected)} this filter now, not the {expected:,} the page "
                    "showed: something changed meanwhile; look again. Nothing was reprocessed"
                ) from None
        kept = {k: v for k, v in form.items() if k in DEAD_FIELDS and v}
        return f"{request.url_for('dead')}?{urlencode({'reprocessed': len(moved), **kept})}"

    return await run_act(request, act)

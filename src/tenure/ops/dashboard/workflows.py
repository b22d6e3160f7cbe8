"""Workflows: the latest ones with their steps counted, and one workflow's steps on a timeline
with what each waits for; cancel and retry a workflow."""

from __future__ import annotations

import psycopg
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tenure.ops.dashboard.actions import Form, run_act
from tenure.ops.dashboard.state import Dashboard, dashboard_of
from tenure.ops.dashboard.workflow_chart import MAX_ROWS, step_timeline
from tenure.ops.views.values import shown_value

LATEST = 100
DONE = {
    "cancelled": "The workflow is cancelled: its waiting steps, queued jobs and running jobs.",
    "retried": "The workflow's dead steps run again; the steps they held follow once they succeed.",
    "nothing": "The workflow has no dead step: nothing to retry.",
}


async def workflows_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    rows = await board.client.list_workflows(limit=LATEST)
    return board.render(request, "workflows.html", {"workflows": rows})


#: The longest published value shown whole on a workflow's page, in characters of JSON.
SHOWN_VALUE = 200


async def workflow_page(request: Request) -> HTMLResponse:
    board = dashboard_of(request)
    workflow_id = int(request.path_params["workflow_id"])
    found = await board.client.get_workflow(workflow_id)
    if found is None:
        missing = {"title": "No such workflow", "message": f"there is no workflow {workflow_id}"}
        return board.render(request, "message.html", missing, status=404)
    steps = await board.client.workflow_steps(workflow_id, limit=MAX_ROWS * 5)
    try:
        values = await board.client.workflow_published(workflow_id)
    except psycopg.errors.UndefinedTable:
        values = []  # a schema from before published values: the page without them
    published = [(v.key, shown_value(v.value, SHOWN_VALUE), v.published_at, v.by_job) for v in values]
    context = {
        "w": found,
        "steps": steps,
        "published": published,
        "timeline": step_timeline(found.created_at, found.db_now, steps),
        "done": DONE.get(request.query_params.get("done", "")),
    }
    return board.render(request, "workflow.html", context)


async def cancel_workflow(request: Request) -> Response:
    workflow_id = int(request.path_params["workflow_id"])

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        await board.client.cancel_workflow(workflow_id, reason=reason, actor=actor)
        return f"{request.url_for('workflow', workflow_id=workflow_id)}?done=cancelled"

    return await run_act(request, act)


async def retry_workflow(request: Request) -> Response:
    workflow_id = int(request.path_params["workflow_id"])

    async def act(board: Dashboard, actor: str, reason: str, form: Form) -> str:
        ids = await board.client.retry_workflow(workflow_id, reason=reason, actor=actor)
        done = "retried" if ids else "nothing"
        return f"{request.url_for('workflow', workflow_id=workflow_id)}?done={done}"

    return await run_act(request, act)

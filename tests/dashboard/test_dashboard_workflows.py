"""The workflow pages over HTTP against a real database: the list, one workflow's timeline and
steps, an unknown id, and the cancel and retry acts with their CSRF token and reason."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from _dashboard_jobs import dashboard_client
from starlette.testclient import TestClient

from tenure import JobContext, Permanent, Tenure, Workflow
from tenure.ops.dashboard import create_app
from tenure.testing import Inline

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def http(dsn: str) -> Iterator[TestClient]:
    with dashboard_client(create_app(dsn)) as client:
        yield client


def _failed_workflow(dsn: str) -> int:
    """A root that succeeds, a step after it that goes dead, and one held behind that."""

    async def build() -> int:
        app = Tenure(dsn)

        @app.task(name="wf.ok", queue="wf")
        async def ok(ctx: JobContext) -> int:
            return 1

        @app.task(name="wf.bad", queue="wf", max_attempts=1)
        async def bad(ctx: JobContext) -> None:
            raise Permanent("no such file", code="NO_FILE")

        wf = Workflow("nightly")
        root = wf.step(ok, name="root")
        broken = wf.step(bad, after=root, name="broken")
        wf.step(ok, after=broken, name="after")
        async with Inline(app) as t:
            run = await app.enqueue_workflow(wf)
            await t.run_workflow(run.id)
        return run.id

    return asyncio.run(build())


def test_the_pages_show_a_failed_workflow_and_its_held_step(http: TestClient, dsn: str) -> None:
    """The list marks the workflow failed; its page draws the two released steps, shows the
    dead step's error code and the held step's dependency; an unknown id is a 404."""
    workflow_id = _failed_workflow(dsn)
    listed = http.get("/workflows")
    assert listed.status_code == 200
    row = listed.text.split(f'data-workflow="{workflow_id}"')[1].split("</tr>")[0]
    assert '<span class="badge failed">failed</span>' in row and "1/3 succeeded, 1 held, 1 dead" in row
    page = http.get(f"/workflows/{workflow_id}")
    assert page.status_code == 200
    assert page.text.count('<rect class="bar ') == 2
    broken = page.text.split('data-step="broken"')[1].split("</tr>")[0]
    assert ">NO_FILE</code>" in broken
    held = page.text.split('data-step="after"')[1].split("</tr>")[0]
    assert '<span class="badge held">held</span>' in held and "<td>broken</td>" in held
    assert http.get("/workflows/999999").status_code == 404


def test_retry_and_cancel_need_a_reason_and_act_through_the_client(http: TestClient, dsn: str) -> None:
    """Without a reason the act is refused (400) and nothing changes; with one, retry
    reprocesses the dead step and cancel then cancels what is left, both recorded."""
    workflow_id = _failed_workflow(dsn)
    page = http.get(f"/workflows/{workflow_id}")
    token = CSRF.search(page.text)
    assert token is not None
    refused = http.post(f"/workflows/{workflow_id}/retry", data={"csrf": token[1], "reason": " "})
    assert refused.status_code == 400
    done = http.post(
        f"/workflows/{workflow_id}/retry",
        data={"csrf": token[1], "reason": "file restored"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"].endswith("?done=retried")
    assert "broken" in http.get(f"/workflows/{workflow_id}").text
    done = http.post(
        f"/workflows/{workflow_id}/cancel",
        data={"csrf": token[1], "reason": "give up"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    page = http.get(done.headers["location"])
    assert "The workflow is cancelled" in page.text and "give up" in page.text


def test_a_step_waiting_on_its_condition_says_what_for_and_since_when(http: TestClient, dsn: str) -> None:
    """A step released by its parent and waiting for its signal shows the job's waiting state and,
    beside its dependency, what runs it and what cancels it."""
    from datetime import timedelta

    from tenure import Elapsed, Signalled

    async def build() -> int:
        app = Tenure(dsn)

        @app.task(name="wf.ok", queue="wf")
        async def ok(ctx: JobContext) -> int:
            return 1

        wf = Workflow("approval")
        root = wf.step(ok, name="reserve")
        wf.step(
            ok,
            after=root,
            name="charge",
            wait_for=Signalled("approve:7"),
            cancel_if=Elapsed(timedelta(days=3)),
        )
        async with Inline(app) as t:
            run = await app.enqueue_workflow(wf)
            await t.run_workflow(run.id)
        return run.id

    workflow_id = asyncio.run(build())
    page = http.get(f"/workflows/{workflow_id}")
    assert page.status_code == 200
    charge = page.text.split('data-step="charge"')[1].split("</tr>")[0]
    assert '<span class="badge waiting">waiting</span>' in charge
    assert "reserve<span" in charge
    assert "a signal to approve:7 runs it; after 3 days it is cancelled" in charge
    assert "waiting since" in charge


def test_the_page_lists_what_its_steps_published(http: TestClient, dsn: str) -> None:
    """A step's published values show on its workflow's page: key, value as JSON, and the job
    that published it; a workflow that published nothing shows no such table."""

    async def build() -> tuple[int, int]:
        app = Tenure(dsn)

        @app.task(name="wf.report", queue="wf")
        async def report(ctx: JobContext) -> None:
            await ctx.publish("stage", {"rows": 3, "note": "<b>done</b>"})

        wf = Workflow("published")
        wf.step(report, name="report")
        async with Inline(app) as t:
            run = await app.enqueue_workflow(wf)
            await t.run_workflow(run.id)
        return run.id, run.jobs["report"]

    workflow_id, job_id = asyncio.run(build())
    page = http.get(f"/workflows/{workflow_id}")
    assert page.status_code == 200
    row = page.text.split('data-key="stage"')[1].split("</tr>")[0]
    assert "&lt;b&gt;done&lt;/b&gt;" in row and "&#34;rows&#34;: 3" in row
    assert f'/jobs/{job_id}">{job_id}</a>' in row
    assert "Published values" not in http.get(f"/workflows/{_failed_workflow(dsn)}").text

"""The dashboard in a real headless Chromium (Debian's), driven by Selenium: what an operator sees
and does, checked in the database after each act. Screenshots go to $TENURE_SCREENSHOTS (the
docs' own are in docs/screenshots/)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvicorn
from _dashboard_jobs import Seeded, seed, seed_attention, seed_waits
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tenure.ops.dashboard import create_app

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HERE = Path(__file__).resolve().parent
#: Where screenshots go: a test artifact folder (TENURE_SCREENSHOTS), else the system's temp
#: folder. `TENURE_SCREENSHOTS=docs/screenshots pytest tests/dashboard` refreshes the docs' ones.
SHOTS = Path(os.environ.get("TENURE_SCREENSHOTS") or Path(tempfile.gettempdir()) / "tenure-screenshots")
DESKTOP = (1280, 900)
PHONE = (390, 844)

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(dsn: str) -> Iterator[str]:
    """The dashboard under uvicorn in a background thread, on a free loopback port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(dsn), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def billing_worker(dsn: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real `tenure worker` serving the billing queue only, so the seeded running job's lease
    and the other queues stay as they are."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"), str(HERE)])}
    argv = ["-m", "tenure.ops.cli", "worker", "_billing_app:app", "--dsn", dsn, "--queues", "billing"]
    proc = subprocess.Popen([sys.executable, *argv, "--poll-interval", "0.2"], env=env, cwd=HERE)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(20)


def wait_for_state(dsn: str, job_id: int, state: str, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while state_of(dsn, job_id) != state:
        assert worker.poll() is None, "the worker exited"
        assert time.monotonic() < deadline, f"job {job_id} is {state_of(dsn, job_id)}, not {state}, after 30s"
        time.sleep(0.1)


@contextlib.contextmanager
def chromium() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    # Both paths given: Selenium Manager has nothing to look up or download.
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_window_size(*DESKTOP)
    try:
        yield driver
    finally:
        driver.quit()


def state_of(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state::text FROM tenure.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def last_event(dsn: str, job_id: int) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT event, worker, error FROM tenure.job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1",
            (job_id,),
        ).fetchone()


def act(driver: WebDriver, form: str, reason: str) -> None:
    """Types the reason into the form found by CSS selector `form` and submits it."""
    target = driver.find_element(By.CSS_SELECTOR, form)
    target.find_element(By.NAME, "reason").send_keys(reason)
    target.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def shoot(driver: WebDriver, name: str, size: tuple[int, int]) -> Path:
    driver.set_window_size(*size)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size[0], max(size[1], min(int(height) + 20, 3000)))
    path = SHOTS / f"{name}.png"
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(path)), f"no screenshot of {name}"
    driver.set_window_size(*DESKTOP)
    return path


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed(dsn)


def test_an_operator_finds_inspects_and_acts_on_jobs_in_the_browser(dsn: str, seeded: Seeded) -> None:
    """Overview (live), payload filter, a job's history, reprocess (and a real worker runs it to
    success), revoke, a waiting job's wait ended, pause and resume, each act seen in the database;
    screenshots at desktop and phone widths."""
    waits = seed_waits(dsn)
    with served(dsn) as base, chromium() as driver, billing_worker(dsn) as worker:
        wait = WebDriverWait(driver, 15)
        driver.get(base + "/")
        assert driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="billing"]')
        shoot(driver, "overview-desktop", DESKTOP)
        shoot(driver, "overview-phone", PHONE)

        # The overview refreshes itself: a queue that appears later shows up without a reload.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO tenure.jobs (queue, task) VALUES ('reports', 'reports.build')")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="reports"]'))

        driver.get(base + "/jobs")
        driver.find_element(By.NAME, "payload").send_keys(json.dumps({"customer_id": 7}))
        driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
        wait.until(lambda d: "payload=" in d.current_url)
        rows = driver.find_elements(By.CSS_SELECTOR, "table.jobs tbody tr")
        listed = {int(r.find_element(By.CSS_SELECTOR, "td a").text) for r in rows}
        assert listed == {seeded.pending, seeded.running}
        shoot(driver, "jobs-desktop", DESKTOP)

        driver.get(f"{base}/jobs/{seeded.dead}")
        timeline = driver.find_element(By.CSS_SELECTOR, "ol.timeline").text
        assert "lease expired" in timeline and "dead" in timeline and "CARD_DECLINED" in timeline
        shoot(driver, "job-desktop", DESKTOP)
        shoot(driver, "job-phone", PHONE)
        act(driver, "form[action$='/retry']", "card replaced")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        # Reprocessed (dead -> pending) by the dashboard's actor; the worker may already have run it.
        assert last_event(dsn, seeded.dead) == ("reprocess", "dashboard:local", "card replaced")
        assert state_of(dsn, seeded.dead) in ("pending", "running", "succeeded")
        assert "reprocess" in driver.find_element(By.CSS_SELECTOR, "ol.timeline").text
        # The worker runs it again, and this time it succeeds; the page shows the result.
        wait_for_state(dsn, seeded.dead, "succeeded", worker)
        driver.refresh()
        assert "succeeded" in driver.find_element(By.CSS_SELECTOR, "h1").text
        assert '"charged": 5' in driver.find_element(By.CSS_SELECTOR, "main").text

        driver.get(f"{base}/jobs/{seeded.running}")
        assert "worker-a" in driver.find_element(By.CSS_SELECTOR, "dl.facts").text
        act(driver, "form[action$='/cancel']", "runaway job")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        assert state_of(dsn, seeded.running) == "cancelled"
        assert last_event(dsn, seeded.running) == ("revoke", "dashboard:local", "runaway job")

        # A job waiting for a signal: its page says for what and until when, and ending its wait
        # sends it back to run at once.
        driver.get(f"{base}/jobs/{waits.approval}")
        waiting = driver.find_element(By.CSS_SELECTOR, "section.waiting-now").text
        assert "Waits for a signal to approve:A-1" in waiting and "until in 3.0d" in waiting
        shoot(driver, "job-waiting-desktop", DESKTOP)
        act(driver, "form.end-wait", "approved by phone")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        assert state_of(dsn, waits.approval) == "pending"
        assert last_event(dsn, waits.approval) == (
            "wait_ended",
            "dashboard:local",
            "wait approve:A-1 ended: approved by phone",
        )
        ended = driver.find_element(By.CSS_SELECTOR, 'tr[data-wait="approve:A-1"]').text
        assert "ended by dashboard:local" in ended

        driver.get(base + "/")
        act(driver, "form[action$='/queues/mail/pause']", "mail provider outage")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "form[action$='/queues/mail/resume']"))
        with psycopg.connect(dsn) as conn:
            pause = conn.execute(
                "SELECT actor, reason FROM tenure.queue_pauses WHERE queue = 'mail'"
            ).fetchone()
        assert pause == ("dashboard:local", "mail provider outage")
        shoot(driver, "overview-paused-desktop", DESKTOP)
        act(driver, "form[action$='/queues/mail/resume']", "outage over")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "form[action$='/queues/mail/pause']"))
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM tenure.queue_pauses").fetchone() == (0,)


def test_an_operator_clears_what_needs_attention_in_the_browser(dsn: str, seeded: Seeded) -> None:
    """From the pages for dead jobs, uncertain effects, blocked keys and schedules: a bulk reprocess
    after reading its count, a verdict on an effect, a skipped head and a paused schedule, each
    seen in the database; screenshots of each page."""
    attention = seed_attention(dsn)
    with served(dsn) as base, chromium() as driver:
        wait = WebDriverWait(driver, 15)
        driver.get(base + "/dead")
        assert "CARD_DECLINED" in driver.find_element(By.CSS_SELECTOR, "table.groups").text
        shoot(driver, "dead-desktop", DESKTOP)
        shoot(driver, "dead-phone", PHONE)
        driver.find_element(By.NAME, "queue").send_keys("billing")
        driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
        wait.until(lambda d: "queue=billing" in d.current_url)
        assert driver.find_element(By.CSS_SELECTOR, "strong.matching").text == "1"
        act(driver, "form.bulk", "card processor fixed")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        assert "1 dead job(s) are pending again" in driver.find_element(By.CSS_SELECTOR, "p.done").text
        assert state_of(dsn, seeded.dead) == "pending"
        assert last_event(dsn, seeded.dead) == ("reprocess", "dashboard:local", "card processor fixed")
        assert state_of(dsn, attention.blocked_head) == "dead"

        driver.get(base + "/effects")
        shoot(driver, "effects-desktop", DESKTOP)
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-effect="{attention.uncertain_effect}"]')
        row.find_element(By.NAME, "reason").send_keys("the bank shows the charge")
        row.find_element(By.CSS_SELECTOR, "button[value=done]").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        assert f"Job {attention.uncertain_job}" in driver.find_element(By.CSS_SELECTOR, "h1").text
        with psycopg.connect(dsn) as conn:
            effect = conn.execute(
                "SELECT state, resolved_by, reason FROM tenure.job_effects WHERE id = %s",
                (attention.uncertain_effect,),
            ).fetchone()
        assert effect == ("done", "dashboard:local", "the bank shows the charge")

        driver.get(base + "/ordering")
        shoot(driver, "ordering-desktop", DESKTOP)
        act(driver, 'tr[data-key="acct-1"] form[action$="/skip"]', "ledger reopened by hand")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        assert state_of(dsn, attention.blocked_head) == "cancelled"
        assert {state_of(dsn, j) for j in attention.waiting} == {"pending"}

        driver.get(base + "/schedules")
        act(driver, 'tr[data-schedule="nightly-report"] form', "month-end freeze")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        shoot(driver, "schedules-desktop", DESKTOP)
        with psycopg.connect(dsn) as conn:
            paused = conn.execute("SELECT paused, paused_by, pause_reason FROM tenure.schedules").fetchone()
        assert paused == (True, "dashboard:local", "month-end freeze")
        driver.get(base + "/workers")
        assert "w-1" in driver.find_element(By.CSS_SELECTOR, "table.workers").text


def test_an_operator_follows_a_workflow_and_cancels_it_in_the_browser(dsn: str) -> None:
    """The workflows page lists a fan-out whose first steps finished; its page draws each
    released step on the timeline and lists what each waits for; cancelling it with a reason
    leaves every step still to run cancelled, in the database too."""
    import asyncio

    from tenure import Tenure, fan_in

    async def enqueue_and_run_two() -> int:
        app = Tenure(dsn)

        @app.task(name="wf.part", queue="wf")
        async def part(ctx: Any, n: int) -> int:
            return n

        @app.task(name="wf.total", queue="wf")
        async def total(ctx: Any, values: list[int]) -> int:
            return sum(values)

        from tenure.testing import Inline

        async with Inline(app) as t:
            run = await app.enqueue_workflow(
                fan_in([part.bind(n=n) for n in range(4)], total, input="values")
            )
            await t.run_workflow(run.id, steps=2)
        return run.id

    workflow_id = asyncio.run(enqueue_and_run_two())
    with served(dsn) as base, chromium() as driver:
        wait = WebDriverWait(driver, 10)
        driver.get(base + "/workflows")
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-workflow="{workflow_id}"]')
        assert "2/5 succeeded, 2 queued, 1 waiting" in row.text
        row.find_element(By.CSS_SELECTOR, "td a").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart.steps"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart.steps rect")) == 4
        assert (
            "wf.part, wf.part-2, wf.part-3, wf.part-4"
            in driver.find_element(By.CSS_SELECTOR, 'tr[data-step="wf.total"]').text
        )
        shoot(driver, "workflow", DESKTOP)
        act(driver, f'form[action$="/workflows/{workflow_id}/cancel"]', "wrong input file")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.done"))
        assert "cancelled" in driver.find_element(By.CSS_SELECTOR, "h1").text
    with psycopg.connect(dsn) as conn:
        states = conn.execute(
            "SELECT state, count(*) FROM tenure.workflow_steps WHERE workflow_id = %s GROUP BY 1 ORDER BY 1",
            (workflow_id,),
        ).fetchall()
    assert states == [("cancelled", 3), ("succeeded", 2)]


def test_the_overview_names_jobs_no_live_worker_runs_in_the_browser(dsn: str) -> None:
    """Jobs of a task no live worker registers (here a typo of the worker's own task) are a
    problem on the overview, with the fix; the worker's own task's jobs are not."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure.jobs (queue, task) VALUES ('mail', 'shop.tasks.send_recept'), "
            "('mail', 'shop.tasks.send_recept'), ('mail', 'shop.tasks.send_receipt')"
        )
        conn.execute(
            "INSERT INTO tenure.workers (id, queues, concurrency, tasks) "
            "VALUES ('w-mail', ARRAY['mail'], 4, ARRAY['shop.tasks.send_receipt'])"
        )
    with served(dsn) as base, chromium() as driver:
        driver.get(base + "/")
        problems = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "section.problems li")]
        shoot(driver, "overview-jobs-without-worker", DESKTOP)
    assert problems == [
        "2 jobs of task shop.tasks.send_recept wait in queue mail, and no live worker registers "
        "shop.tasks.send_recept: start a worker that imports the module defining it (a task "
        "registered in a script run directly is named __main__.send_recept)"
    ], problems

"""docs/django.md and docs/fastapi.md are their examples: every code block is in the example's
file it names, and the guide's steps, run as a reader runs them, serve the example and do what
the guide says they do.

A guide's python blocks start with `# PATH`, a file of the example (examples/django_shop or
examples/fastapi_shop); a line `# ...` stands for lines of the file the block leaves out. Its
block marked `<!-- run by tests/docs/test_guides.py -->` runs line by line from the repository's
root, as the README's blocks do (tests/docs/test_readme_examples.py): `cd` moves on, the servers
(`manage.py tenure_worker`, `manage.py runserver`, `uvicorn`) start in the background as in their
own terminals, and each other line must exit 0. The one liberty taken: port 8000, which may be
taken on a test machine, becomes a free port.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_readme_examples import Block, blocks, commands

ROOT = Path(__file__).resolve().parents[2]
GUIDES = {
    ROOT / "docs" / "django.md": ROOT / "examples" / "django_shop",
    ROOT / "docs" / "fastapi.md": ROOT / "examples" / "fastapi_shop",
}
RUN_MARKER = "<!-- run by tests/docs/test_guides.py -->"
ELIDED = "# ..."
SERVER = re.compile(r"manage\.py (tenure_worker|runserver)\b|^uvicorn\b")


# -- the guide's code is the example's --------------------------------------------------------


def example_file(block: Block, example: Path) -> Path:
    first = block.text.splitlines()[0]
    match = re.fullmatch(r"# ([\w/]+\.py)", first)
    assert match, (
        f"{block.where}: a guide's python block starts with '# PATH', the example's file it is taken "
        f"from, or is marked '<!-- not run by tests/docs: REASON -->'; it starts {first!r}"
    )
    path = example / match.group(1)
    assert path.is_file(), f"{block.where} names {path.relative_to(ROOT)}, which does not exist"
    return path


def missing_from(block_text: str, file_text: str) -> list[str] | None:
    """The first part of `block_text` (after its `# PATH` line, in parts split at `# ...` lines)
    that is not in `file_text` in that order, or None when every part is."""
    lines = file_text.splitlines()
    parts: list[list[str]] = [[]]
    for line in block_text.splitlines()[1:]:
        if line.strip() == ELIDED:
            parts.append([])
        else:
            parts[-1].append(line)
    at = 0
    for part in (p for p in parts if p):
        found = next(
            (i for i in range(at, len(lines) - len(part) + 1) if lines[i : i + len(part)] == part), None
        )
        if found is None:
            return part
        at = found + len(part)
    return None


def python_blocks(guide: Path) -> list[Block]:
    return [b for b in blocks(guide) if b.language == "python" and not b.not_run]


@pytest.mark.parametrize("guide", list(GUIDES), ids=lambda p: p.name)
def test_every_code_block_is_in_the_examples_file(guide: Path) -> None:
    """Each python block of the guide is, line for line, in the example's file it names."""
    example = GUIDES[guide]
    checked = python_blocks(guide)
    assert len(checked) >= 3, f"{guide.name} shows {len(checked)} blocks of its example"
    for block in checked:
        path = example_file(block, example)
        part = missing_from(block.text, path.read_text(encoding="utf-8"))
        assert part is None, f"{block.where} differs from {path.relative_to(ROOT)}: not found there:\n" + (
            "\n".join(part or [])
        )


def test_the_excerpt_check_catches_a_changed_line() -> None:
    """The check is not vacuous: a changed line, or parts out of order, are found; elisions are allowed."""
    file_text = "a = 1\nb = 2\nc = 3\nd = 4\n"
    assert missing_from("# f.py\na = 1\n# ...\nd = 4\n", file_text) is None
    assert missing_from("# f.py\na = 1\nb = 3\n", file_text) == ["a = 1", "b = 3"]
    assert missing_from("# f.py\nd = 4\n# ...\na = 1\n", file_text) == ["a = 1"]


# -- the guide's steps, run ---------------------------------------------------------------------


@dataclass
class Steps:
    """What running a guide's steps left: each command's output, and the servers still running."""

    outputs: list[tuple[str, str]] = field(default_factory=list)
    servers: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def output(self, startswith: str) -> list[str]:
        return [out for line, out in self.outputs if line.startswith(startswith)]

    def log(self, name: str) -> str:
        return next(path.read_text() for line, _, path in self.servers if name in line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, steps: Steps) -> None:
    """Waits as a reader waits for a server's "listening" line before sending it a request."""
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        for line, server, log in steps.servers:
            assert server.poll() is None, f"`{line}` exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"nothing listens on port {port}"
        time.sleep(0.1)


@contextlib.contextmanager
def run_block(guide: Path, env: dict[str, str], logs: Path) -> Iterator[Steps]:
    """Runs the guide's marked block; yields what it left, then stops its servers as Ctrl-C would."""
    [block] = [b for b in blocks(guide) if b.language == "bash" and _marked(guide, b)]
    port = free_port()
    steps = Steps()
    cwd = ROOT
    try:
        for n, line in enumerate(commands(block)):
            line = line.replace("8000", str(port))
            if line.startswith("cd "):
                cwd = cwd / line.removeprefix("cd ").strip()
                continue
            if SERVER.search(line):
                log = logs / f"server-{n}.log"
                with log.open("wb") as out:
                    server = subprocess.Popen(
                        shlex.split(line, comments=True),
                        cwd=cwd,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                steps.servers.append((line, server, log))
                continue
            if line.startswith("curl "):
                wait_for_port(port, steps)
            done = subprocess.run(
                line, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, (block.where, line, done.stdout, done.stderr)
            steps.outputs.append((line, done.stdout))
        yield steps
    finally:
        for _, server, _ in steps.servers:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGINT)
        for _, server, _ in steps.servers:
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def _marked(guide: Path, block: Block) -> bool:
    lines = guide.read_text(encoding="utf-8").splitlines()
    above = next(lines[k].strip() for k in range(block.line - 2, -1, -1) if lines[k].strip())
    return above == RUN_MARKER


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def wait_for_job(dsn: str, steps: Steps) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + 60
    while True:
        jobs = rows(dsn, "SELECT id, state::text FROM tenure.jobs ORDER BY id")
        if jobs and all(state == "succeeded" for _, state in jobs):
            return jobs
        for line, server, log in steps.servers:
            assert server.poll() is None, f"`{line}` exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"the job did not succeed: {jobs}"
        time.sleep(0.1)


@pytest.mark.slow
def test_django_guide_steps_serve_the_example(empty_dsn: str, tmp_path: Path) -> None:
    """docs/django.md's steps migrate, run the worker and the server: the first order's job
    succeeds, the declined order leaves nothing, its traceback is in the server's console, and
    `manage.py tenure status` reads the shop's database."""
    env = {**os.environ, "SHOP_DSN": empty_dsn}
    env.pop("TENURE_DSN", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    with run_block(ROOT / "docs" / "django.md", env, tmp_path) as steps:
        placed, declined = steps.output("curl ")
        assert json.loads(placed) == {"order": 1, "job": 1}, placed
        assert "Server Error (500)" in declined, declined
        assert wait_for_job(empty_dsn, steps) == [(1, "succeeded")]
        assert rows(empty_dsn, "SELECT id, email, receipt_sent FROM shop_order") == [
            (1, "a@example.com", True)
        ]
        assert "emails" in steps.output("python manage.py tenure status")[0]
        server_log = steps.log("runserver")
        assert "PaymentDeclined: card declined for order 2" in server_log, server_log
    worker = next(server for line, server, _ in steps.servers if "tenure_worker" in line)
    assert worker.returncode == 0, steps.log("tenure_worker")


@pytest.mark.slow
def test_fastapi_guide_steps_serve_the_example(empty_dsn: str, tmp_path: Path) -> None:
    """docs/fastapi.md's steps start the app, which migrates and runs its worker: the first order's
    job succeeds, the declined order is a 402 that leaves nothing, and Ctrl-C stops it cleanly."""
    env = {**os.environ, "TENURE_DSN": empty_dsn}
    with run_block(ROOT / "docs" / "fastapi.md", env, tmp_path) as steps:
        placed, declined, job = steps.output("curl ")
        assert json.loads(placed) == {"order": 1, "job": 1}, placed
        assert json.loads(declined) == {"detail": "card declined for order 2"}, declined
        assert json.loads(job)["id"] == 1, job
        assert wait_for_job(empty_dsn, steps) == [(1, "succeeded")]
        assert rows(empty_dsn, "SELECT id, email FROM orders") == [(1, "a@example.com")]
    [(_, server, log)] = steps.servers
    assert server.returncode == 0, log.read_text()
    assert "Application shutdown complete" in log.read_text()

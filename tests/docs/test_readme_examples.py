"""The README and the docs as a reader copies them.

The README's blocks run verbatim, in a fresh folder against a fresh database: each ```python
block that starts with `# path.py` is written to that file, and each ```bash block's lines run
in order in a shell (`tenure worker` in the background, as in its own terminal). A block marked
`<!-- not run by tests/docs: REASON -->` is not run; `test_readme_runs_all_but_three_blocks`
names those, and they are checked like the docs' blocks: Python compiles and every `tenure.X`,
`ctx.X` and `app.X` it uses exists, and every `tenure ...` command parses with the real CLI.
Docs blocks marked `<!-- run by tests/docs -->` run their `tenure` commands for real.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tenure
from tenure.ops.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"<!--\s*not run by tests/docs:\s*(.+?)\s*-->")
RUN = "<!-- run by tests/docs -->"
FENCE = re.compile(r"^```(\w*)\s*$")
CHECKED_LANGUAGES = {"python", "bash", "console"}
#: The API objects whose attributes the docs use by these names.
NAMESPACES: dict[str, Any] = {"tenure": tenure, "ctx": tenure.JobContext, "app": tenure.Tenure}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    text: str
    not_run: str | None  # the reason given in the marker, when the block is not run
    run: bool  # a docs block marked to run

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with the marker comment just above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = NOT_RUN.fullmatch(above)
        found.append(
            Block(
                path,
                i + 1,
                opening.group(1),
                "\n".join(lines[i + 1 : end]) + "\n",
                marker.group(1) if marker else None,
                above == RUN,
            )
        )
        i = end + 1
    return found


def checked_blocks() -> Iterator[Block]:
    """Every block that is checked but not run: README blocks marked so, and docs blocks."""
    for path in DOCUMENTS:
        for block in blocks(path):
            if block.language in CHECKED_LANGUAGES and (path != README or block.not_run):
                yield block


# -- the README, run ---------------------------------------------------------------------------


def readme_file(block: Block) -> str:
    first = block.text.splitlines()[0]
    match = re.fullmatch(r"# ([\w/]+\.py)", first)
    assert match, (
        f"{block.where}: a README python block must start with '# path/to/file.py' (the file a "
        f"reader saves it as), or be marked '<!-- not run by tests/docs: REASON -->'; it starts {first!r}"
    )
    return match.group(1)


def commands(block: Block) -> list[str]:
    return [line for line in block.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def jobs(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task, queue, max_attempts, state::text, payload, idempotency_key, last_error, result "
            "FROM tenure.jobs ORDER BY id"
        ).fetchall()


def wait_until_finished(dsn: str, expected: int, worker: subprocess.Popen[bytes]) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + 90
    while True:
        rows = jobs(dsn)
        if len(rows) >= expected and all(r[3] in ("succeeded", "dead", "cancelled") for r in rows):
            return rows
        assert worker.poll() is None, "the README's worker exited"
        assert time.monotonic() < deadline, f"jobs did not finish: {rows}"
        time.sleep(0.2)


def test_readme_first_ten_minutes_runs_verbatim(dsn: str, tmp_path: Path) -> None:
    """The README's files and commands, copied as they stand, migrate, run a worker, enqueue from the
    CLI, from a transaction and blocking, wait for a result, cancel by filter, pause and resume a
    queue, run a fan-in workflow, and every job ends where and as the README says."""
    assert shutil.which("tenure"), "the `tenure` command is not installed (pip install -e '.[dev]')"
    runnable = [b for b in blocks(README) if b.language in ("python", "bash") and not b.not_run]
    for block in runnable:
        if block.language == "python":
            target = tmp_path / readme_file(block)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
    (tmp_path / "logs").mkdir()  # the reader's own log files, for compress_logs to pack
    for name in ("web.log", "worker.log"):
        (tmp_path / "logs" / name).write_text(f"{name}: a line of log\n" * 100)
    env = {**os.environ, "TENURE_DSN": dsn}
    worker: subprocess.Popen[bytes] | None = None
    worker_log = (tmp_path / "worker.out").open("wb")
    try:
        for block in (b for b in runnable if b.language == "bash"):
            for line in commands(block):
                if re.match(r"tenure worker\b", line):
                    # Split as the shell would, and started without one, so its exit code is the worker's.
                    argv = shlex.split(line, comments=True)
                    worker = subprocess.Popen(
                        argv, cwd=tmp_path, env=env, stdout=worker_log, stderr=subprocess.STDOUT
                    )
                    continue
                done = subprocess.run(
                    line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
                )
                assert done.returncode == 0, (block.where, line, done.stdout, done.stderr)
        assert worker is not None, "the README starts no `tenure worker`"
        rows = wait_until_finished(dsn, 10, worker)
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)  # what Ctrl-C or a process manager sends
            worker.wait(timeout=30)
        worker_log.close()
    assert worker.returncode == 0, (tmp_path / "worker.out").read_text()
    send, compress = "shop.tasks.send_receipt", "shop.tasks.compress_logs"
    count = "shop.tasks.count_logs"
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        (send, "emails", 5, "succeeded", {"order_id": 7, "email": "a@b.c"}),
        (compress, "files", 20, "succeeded", {"folder": "logs"}),
        (send, "emails", 5, "succeeded", {"order_id": 8, "email": "b@c.d"}),
        (compress, "files", 20, "succeeded", {"folder": "logs"}),
        (count, "files", 20, "succeeded", {"folder": "logs"}),
        (send, "emails", 5, "cancelled", {"order_id": 9, "email": "c@d.e"}),
        (count, "files", 20, "succeeded", {"folder": "logs"}),
        (count, "files", 20, "succeeded", {"folder": "logs"}),
        (count, "files", 20, "succeeded", {"folder": "logs"}),
        ("shop.tasks.total", "files", 20, "succeeded", {"counts": [2, 2, 2]}),
    ], rows
    assert rows[9][7] == 6, "the workflow's total is the sum of its three counts"
    assert rows[4][7] == 2, "count_logs's result is the number of log files"
    assert rows[5][6] == "order refunded", "the cancel's reason is the job's last error"
    receipts = sorted(p.name for p in (tmp_path / "outbox").iterdir())
    assert receipts == sorted(f"{r[5]}.eml" for r in rows if r[0] == send and r[3] == "succeeded")
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["web.log.gz", "worker.log.gz"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT id, email FROM orders").fetchall() == [(8, "b@c.d")]


def test_readme_runs_all_but_three_blocks() -> None:
    """The README opens with its two set-up commands and `tenure demo`; besides those it skips only
    the transfer fragment, each with its reason, and runs everything else."""
    readme = [b for b in blocks(README) if b.language in CHECKED_LANGUAGES]
    assert [commands(b) for b in readme[:2]] == [["bash scripts/install.sh", "pytest"], ["tenure demo"]]
    skipped = {b.where: b.not_run for b in readme if b.not_run}
    assert len(skipped) == 3 and all(skipped.values()), skipped
    assert "accounts table" in str(skipped[f"README.md:{readme[-1].line}"])


# -- every other block, checked against the real API and CLI ----------------------------------


def used_attributes(tree: ast.AST) -> Iterator[tuple[str, str]]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in NAMESPACES
        ):
            yield node.value.id, node.attr


def tenure_commands(block: Block) -> list[list[str]]:
    """The argv of every `tenure ...` command in a shell or console block."""
    found = []
    for line in block.text.splitlines():
        text = line.strip().removeprefix("$ ")
        if not text or text.startswith("#") or "tenure" not in text:
            continue
        words = shlex.split(text, comments=True)
        if "tenure" not in words:
            continue
        argv = words[words.index("tenure") + 1 :]
        for i, word in enumerate(argv):
            if word in ("||", "|", "&&", ";", ">", "2>&1"):
                argv = argv[:i]
                break
        found.append(argv)
    return found


@pytest.mark.parametrize("block", list(checked_blocks()), ids=lambda b: f"{b.where} {b.language}")
def test_a_block_not_run_still_matches_the_api(block: Block, capsys: pytest.CaptureFixture[str]) -> None:
    """A block that is not run compiles (Python) and names only what exists: `tenure.X`, `ctx.X` and
    `app.X` attributes, and `tenure` commands and options the CLI accepts."""
    if block.language == "python":
        tree = compile(block.text, block.where, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        missing = [
            f"{name}.{attr}" for name, attr in used_attributes(tree) if not hasattr(NAMESPACES[name], attr)
        ]
        assert missing == [], f"{block.where} uses {missing}, which do not exist"
        return
    parser = build_parser()
    for argv in tenure_commands(block):
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{block.where}: `tenure {shlex.join(argv)}` is refused: {capsys.readouterr().err}")


def marked_to_run() -> list[Block]:
    return [b for path in DOCUMENTS[1:] for b in blocks(path) if b.run]


@pytest.mark.parametrize("block", marked_to_run(), ids=lambda b: b.where)
def test_docs_commands_marked_to_run_succeed(block: Block, dsn: str, tmp_path: Path) -> None:
    """Each `tenure` command of a docs block marked to run exits 0 against a fresh database."""
    argvs = tenure_commands(block)
    assert argvs, f"{block.where} is marked to run but has no tenure command"
    env = {**os.environ, "TENURE_DSN": dsn}
    for argv in argvs:
        done = subprocess.run(
            ["tenure", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (block.where, argv, done.stdout, done.stderr)


def test_the_checks_catch_a_renamed_name_or_option(capsys: pytest.CaptureFixture[str]) -> None:
    """The static checks are not vacuous: an API name that does not exist, and a CLI option that
    does not, are both found."""
    python = Block(README, 1, "python", "await app.enqueue_later(tenure.Nope, ctx.progres)\n", "x", False)
    tree = compile(python.text, "x", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    missing = [f"{n}.{a}" for n, a in used_attributes(tree) if not hasattr(NAMESPACES[n], a)]
    assert missing == ["app.enqueue_later", "tenure.Nope", "ctx.progres"]
    shell = Block(README, 1, "console", "$ tenure enqueue t --urgency 3  # note\n$ ls | tenure\n", "x", False)
    assert tenure_commands(shell) == [["enqueue", "t", "--urgency", "3"], []]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["enqueue", "t", "--urgency", "3"])
    capsys.readouterr()

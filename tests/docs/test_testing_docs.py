"""docs/testing.md's example project, as a reader copies it: its blocks written to a fresh folder,
Tenure installed from a wheel of this tree, a `tenure worker` for the app running on the default
schema of the same database, and plain `pytest` passing there: in pytest-asyncio's default
(strict) mode, in its auto mode, and, for the blocking tests, without it. The worker runs none of
the tests' jobs, and the tests' schemas are gone afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_readme_examples import blocks

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "testing.md"
FILE_LINE = re.compile(r"# ([\w/]+\.(?:py|toml))")

pytestmark = pytest.mark.slow


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def example_files() -> dict[str, str]:
    """The guide's blocks that start with `# path`: the files of its example project."""
    found = {}
    for block in blocks(GUIDE):
        match = FILE_LINE.fullmatch(block.text.splitlines()[0])
        if match and block.language in ("python", "toml"):
            found[match.group(1)] = block.text
    return found


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with a wheel of this tree installed, beside the machine's pytest and
    pytest-asyncio (as `pip install tenure pytest pytest-asyncio` leaves it); its bin folder."""
    where = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "build", "--wheel", "--outdir", str(where / "dist"), str(ROOT)])
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = list((where / "dist").glob("tenure-*.whl"))
    venv.create(where / "venv", with_pip=True, system_site_packages=True)
    bin_dir = where / "venv" / "bin"
    done = run([str(bin_dir / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(wheel)])
    assert done.returncode == 0, done.stderr[-3000:]
    return bin_dir


@pytest.fixture
def dev_worker(installed: Path, dsn: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The developer's worker for the example's app, on the default schema of the tests' database,
    proven to be running by a job of its own it has run."""
    for path, text in example_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [str(installed / "tenure"), "worker", "shop.tasks"],
        cwd=tmp_path,
        env=reader_env(installed, dsn),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO tenure.jobs (queue, task, payload) VALUES "
                "('emails', 'shop.tasks.remind', '{\"order_id\": 1}')"
            )
            deadline = time.monotonic() + 60
            while conn.execute("SELECT count(*) FROM tenure.jobs WHERE state = 'succeeded'").fetchone() != (
                1,
            ):
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
                time.sleep(0.1)
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        log.close()


def reader_env(bin_dir: Path, dsn: str) -> dict[str, str]:
    """The reader's shell: the venv first on PATH, and nothing of this checkout's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")
    }
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "TENURE_DSN": dsn}


def test_the_guide_shows_a_whole_project() -> None:
    """The guide's example is its app, its code, an async and a blocking test file, and its settings."""
    assert sorted(example_files()) == [
        "pyproject.toml",
        "shop/orders.py",
        "shop/tasks.py",
        "tests/test_orders.py",
        "tests/test_orders_sync.py",
    ]


def test_the_guides_tests_pass_beside_a_running_worker(
    installed: Path, dev_worker: subprocess.Popen[bytes], dsn: str, tmp_path: Path
) -> None:
    """`pytest` in the example's folder passes in strict mode, in auto mode and (its blocking tests)
    without pytest-asyncio, while the developer's worker runs on the same database: that worker
    runs no job of the tests, and no test schema is left behind."""
    env = reader_env(installed, dsn)
    python = str(installed / "python")
    for extra in ([], ["-o", "asyncio_mode=auto"], ["-p", "no:asyncio", "tests/test_orders_sync.py"]):
        done = run([python, "-m", "pytest", "-p", "no:cacheprovider", *extra], cwd=tmp_path, env=env)
        assert done.returncode == 0, (extra, done.stdout[-4000:], done.stderr[-2000:])
        assert re.search(r"\b[23] passed\b", done.stdout) and "failed" not in done.stdout, done.stdout
    assert dev_worker.poll() is None, (tmp_path / "worker.log").read_text()
    with psycopg.connect(dsn) as conn:
        default_schema = conn.execute("SELECT task, payload FROM tenure.jobs ORDER BY id").fetchall()
        left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tenure_test_%'").fetchall()
    assert default_schema == [("shop.tasks.remind", {"order_id": 1})]
    assert left == []

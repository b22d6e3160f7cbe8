"""The package as a user gets it: a wheel built from this tree, installed in a fresh virtual
environment with nothing else, runs `tenure demo` on the embedded server."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tenure.db.embedded import stop_embedded

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def test_a_wheel_in_a_fresh_venv_runs_the_demo(tmp_path: Path) -> None:
    """The wheel carries the SQL, templates and py.typed; installed alone it gives `tenure` and
    `python -m tenure`, runs the demo with every invariant holding, and says which extra the
    dashboard needs."""
    built = run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--outdir",
            str(tmp_path / "dist"),
            str(ROOT),
        ]
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = list((tmp_path / "dist").glob("tenure-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "tenure/py.typed",
        "tenure/db/sql/leases.sql",
        "tenure/ops/dashboard/templates/base.html",
    ):
        assert shipped in names, shipped
    assert any(n.startswith("tenure/db/migrations/") and n.endswith(".sql") for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    installed = run([str(bin_dir / "pip"), "install", "-q", str(wheel)])
    assert installed.returncode == 0, installed.stderr[-3000:]

    # Its own home: the embedded server's data directory must not be the developer's.
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
    }
    version = run([str(bin_dir / "python"), "-m", "tenure", "--help"], env=env, cwd=tmp_path)
    assert version.returncode == 0 and "demo" in version.stdout
    try:
        demo = run(
            [str(bin_dir / "tenure"), "demo", "--transfers", "300", "--accounts", "20", "--concurrency", "4"],
            env=env,
            cwd=tmp_path,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert "all invariants hold" in demo.stdout
        dashboard = run([str(bin_dir / "tenure"), "dashboard"], env=env, cwd=tmp_path)
        assert dashboard.returncode == 2 and "pip install 'tenure[dashboard]'" in dashboard.stderr
    finally:
        # The embedded server outlives the commands that started it (the next one reuses it):
        # the demo's own, in this test's home, is stopped here rather than left running.
        stop_embedded(tmp_path / "home" / ".local" / "share" / "tenure" / "pgdata")

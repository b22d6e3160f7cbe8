"""An operator command run as a role that may not do it: one line naming the role to use, a
non-zero exit, no traceback, and nothing changed. With real least-privilege roles."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _ops import cli, sql
from psycopg import conninfo

from tenure.security.roles import Role, grants

SRC = str(Path(__file__).resolve().parents[2] / "src")


def as_role(dsn: str, role: str) -> str:
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    return conninfo.make_conninfo(**params)


#: A login with no Tenure GRANT at all, beside the three roles `tenure roles` prints.
STRANGER = "stranger"


@pytest.fixture
def roles(dsn: str) -> Iterator[dict[Role | str, str]]:
    """Fresh LOGIN roles with the GRANTs `tenure roles` prints, and one with none, on this test's
    database; dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    names: dict[Role | str, str] = {role: f"tenure_{role.value}_{tag}" for role in Role}
    names[STRANGER] = f"tenure_{STRANGER}_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role, name in names.items():
            conn.execute(f'CREATE ROLE "{name}" LOGIN')
            if isinstance(role, Role):
                conn.execute(grants(role, name, "tenure"))
    yield names
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names.values():
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')


def pending_job(dsn: str) -> int:
    [(job_id,)] = sql(dsn, "INSERT INTO tenure.jobs (queue, task) VALUES ('mail', 'mail.send') RETURNING id")
    return int(job_id)


def test_cancel_as_the_worker_role_names_the_admin_role_in_one_line(
    dsn: str, roles: dict[Role | str, str]
) -> None:
    """`tenure cancel` as the worker role exits non-zero with one line on stderr naming the admin
    role and `tenure roles`, no traceback, and the job stays pending."""
    job_id = pending_job(dsn)
    env = {**os.environ, "PYTHONPATH": SRC}
    argv = ["cancel", str(job_id), "--reason", "stop", "--dsn", as_role(dsn, roles[Role.WORKER])]
    done = subprocess.run(
        [sys.executable, "-m", "tenure.ops.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "InsufficientPrivilege" not in done.stderr
    assert "admin role" in lines[0] and "tenure roles" in lines[0] and "tenure cancel" in lines[0]
    assert sql(dsn, "SELECT state::text FROM tenure.jobs WHERE id = %s", (job_id,)) == [("pending",)]


@pytest.mark.parametrize(
    ("role", "argv", "needed"),
    [
        (Role.WORKER, ["queues", "pause", "mail", "--reason", "deploy"], "admin role"),
        (Role.WORKER, ["dead", "purge", "--older-than", "1s", "--yes"], "admin role"),
        (Role.PRODUCER, ["status"], "admin role"),
        (Role.PRODUCER, ["retry", "{job}", "--reason", "now"], "admin role"),
        (STRANGER, ["enqueue", "mail.send", "--by-name", "--queue", "mail"], "producer role"),
    ],
    ids=["queues-pause", "dead-purge", "status", "retry", "enqueue"],
)
def test_any_operator_command_refused_for_privileges_says_which_role_in_one_line(
    dsn: str,
    roles: dict[Role | str, str],
    capsys: pytest.CaptureFixture[str],
    role: Role | str,
    argv: list[str],
    needed: str,
) -> None:
    """Whichever command the database refuses for want of a privilege, the CLI says in one line
    which role runs it, and exits non-zero; the database is as it was."""
    job_id = pending_job(dsn)
    before = sql(dsn, "SELECT id, state::text, available_at FROM tenure.jobs ORDER BY id")
    args = [a.replace("{job}", str(job_id)) for a in argv]
    code, printed, err = cli(capsys, *args, "--dsn", as_role(dsn, roles[role]))
    assert code != 0, printed
    assert needed in err and "tenure roles" in err and "Traceback" not in err
    assert sql(dsn, "SELECT id, state::text, available_at FROM tenure.jobs ORDER BY id") == before
    assert sql(dsn, "SELECT count(*) FROM tenure.queue_pauses") == [(0,)]

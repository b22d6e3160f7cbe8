"""The benchmark's count of a process group's server CPU keeps what a backend used before it
exited: a worker replacing its connection mid-drain must not make its server look cheaper."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

from tenure.lab.bench.cpu import cpu_seconds
from tenure.lab.bench.drain import BackendCpu

#: A statement that keeps its backend busy for a measurable while (tens of milliseconds).
BUSY = "SELECT count(*) FROM generate_series(1, 2000000)"


@dataclass
class _Group:
    """The one thing BackendCpu asks of a process group: the prefix of its session names."""

    name_prefix: str


def _session(dsn: str, name: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, application_name=name)


def _busy(conn: psycopg.Connection) -> int:
    conn.execute(BUSY)
    return conn.info.backend_pid


async def test_a_replaced_backend_keeps_the_cpu_it_used_before_it_exited(server_dsn: str) -> None:
    """A backend that ran a busy statement, was sampled, and then closed (as a replaced kept
    connection is) still counts: the group's total is at least what both backends used."""
    prefix = f"cpu-test-{uuid.uuid4().hex[:8]}-"
    counted = BackendCpu(_Group(prefix))  # type: ignore[arg-type]
    async with await psycopg.AsyncConnection.connect(server_dsn, autocommit=True) as reader:
        with _session(server_dsn, prefix + "old") as old:
            await counted.start(reader)
            old_pid = _busy(old)
            old_used = cpu_seconds(old_pid)
            await counted.sample(reader)
        with _session(server_dsn, prefix + "new") as new:
            new_pid = _busy(new)
            new_used = cpu_seconds(new_pid)
            total = await counted.used(reader)
    assert old_used is not None and new_used is not None, "the server does not run on this machine"
    assert total is not None
    # The old backend's start-up before the first reading is not in the total; its statement is.
    assert total >= new_used + 0.5 * old_used, (total, old_used, new_used)
    assert old_pid in counted.latest and new_pid in counted.latest

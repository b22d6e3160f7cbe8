"""The approval flow of docs/waits.md runs as documented (examples/approval_flow.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import psycopg

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approval_flow.py"


async def test_the_approval_flow_charges_the_approved_order_and_releases_the_refused_one(dsn: str) -> None:
    """A-1 waits and is approved: reserved once (not again after the wait), charged; B-2's refusal
    was sent before it waited and is taken at once: reserved, released. Each signal woke one job,
    and A-1's wait is in its history."""
    spec = importlib.util.spec_from_file_location("example_approval_flow", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example
    spec.loader.exec_module(example)
    report = await example.main(dsn)
    report["reserved"].sort()  # the two orders run side by side
    assert report == {
        "results": [
            {"order": "A-1", "outcome": "charged", "by": "bo"},
            {"order": "B-2", "outcome": "cancelled", "why": "refused"},
        ],
        "reserved": ["A-1", "B-2"],
        "charged": ["A-1"],
        "released": ["B-2"],
    }
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("SELECT name, state FROM tenure.job_waits ORDER BY job_id")
        assert await cur.fetchall() == [("approve:A-1", "signalled"), ("approve:B-2", "signalled")]
        cur = await conn.execute("SELECT count(*) FROM tenure.signals WHERE job_id IS NULL")
        assert await cur.fetchone() == (0,)

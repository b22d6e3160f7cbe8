"""The operator's side of ordering and fairness: `tenure ordering blocked / skip`, weighted
`--queues a=3,b=1`, and clear errors for bad settings."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import pytest
from psycopg import AsyncConnection

from tenure import JobSpec, WorkerOptions
from tenure.db.queries import Queries
from tenure.model.errors import ConfigurationError, TenureError
from tenure.ops.cli import main
from tenure.ops.cli.worker import oldest_every, parse_queues


async def dead_head(db: AsyncConnection[Any], queries: Queries) -> tuple[int, int]:
    head, follower = [
        j.id for j in await queries.job_insert_many(db, [JobSpec(task="t", ordering_key="acct-7")] * 2)
    ]
    await queries.job_claim(
        db, queue="default", owner="w", limit=5, default_lease_seconds=30, default_runtime_seconds=60
    )
    await queries.job_fail(
        db, job_id=head, owner="w", token=1, error_code="BOOM", error="x", retry_delay=None
    )
    return head, follower


async def cli(argv: list[str]) -> int:
    """The CLI in a thread: it runs its own event loop."""
    return await asyncio.to_thread(main, argv)


async def test_ordering_blocked_lists_the_dead_head_and_skip_frees_the_key(
    dsn: str, db: AsyncConnection[Any], queries: Queries, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ordering blocked` shows the dead head with one job waiting; `skip` cancels it, once."""
    head, _ = await dead_head(db, queries)
    capsys.readouterr()
    assert await cli(["ordering", "blocked", "--dsn", dsn, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["id"], row["ordering_key"], row["waiting"], row["last_error_code"]) == (
        head,
        "acct-7",
        1,
        "BOOM",
    )

    assert await cli(["ordering", "skip", str(head), "--reason", "applied by hand", "--dsn", dsn]) == 0
    assert await cli(["ordering", "skip", str(head), "--reason", "again", "--dsn", dsn]) == 1
    assert "not a dead or pending job with an ordering key" in capsys.readouterr().err
    assert await cli(["ordering", "blocked", "--dsn", dsn]) == 0
    assert "no ordering key is blocked" in capsys.readouterr().out


def test_weighted_queues_parse_and_bad_weights_are_refused() -> None:
    """`a=3,b` gives weights {a: 3}; zero, negative or non-numeric weights name the fix."""
    assert parse_queues("a=3,b") == (["a", "b"], {"a": 3})
    assert parse_queues("a,b") == (["a", "b"], None)
    assert parse_queues(None) == (None, None)
    for bad in ("a=0", "a=-1", "a=x"):
        with pytest.raises(TenureError, match="integer >= 1"):
            parse_queues(bad)
    with pytest.raises(ConfigurationError, match="queue weight"):
        WorkerOptions(queue_weights={"a": 0})


def test_removed_aging_options_and_bad_oldest_every_are_refused_with_the_fix() -> None:
    """The priority-aging options are gone: setting one names oldest_every instead (None, meaning
    no aging, is what happens anyway); oldest_every must be an integer >= 1 or None."""
    for removed in ({"priority_aging_seconds": 60.0}, {"priority_aging_max": 100}):
        with pytest.raises(ConfigurationError, match=r"were removed.*oldest_every"):
            WorkerOptions(**removed)  # type: ignore[arg-type]
    assert WorkerOptions(priority_aging_seconds=None).oldest_every == 10
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ConfigurationError, match="oldest_every must be an integer >= 1"):
            WorkerOptions(oldest_every=bad)  # type: ignore[arg-type]
    assert WorkerOptions(oldest_every=None).oldest_every is None
    assert WorkerOptions(oldest_every=1).oldest_every == 1


BY_NAME = ["--by-name", "--queue", "default"]


async def test_enqueue_takes_an_ordering_key_and_refuses_it_with_copy(
    dsn: str, db: AsyncConnection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`enqueue --ordering-key` stores the key; with `--count` (COPY) it is refused and nothing is written."""
    assert await cli(["enqueue", "t", *BY_NAME, "--ordering-key", "acct-1", "--dsn", dsn, "--json"]) == 0
    assert (
        await cli(["enqueue", "t", *BY_NAME, "--ordering-key", "acct-1", "--count", "3", "--dsn", dsn]) != 0
    )
    assert "enqueue_many" in capsys.readouterr().err
    rows = await (await db.execute("SELECT ordering_key FROM tenure.jobs")).fetchall()
    assert rows == [("acct-1",)]


def test_worker_oldest_every_flag_takes_a_count_or_off() -> None:
    """`--oldest-every 5` is 5, `off` turns the share off, and 0 or a word is refused with the fix."""
    assert oldest_every("5") == 5 and oldest_every("off") is None and oldest_every("OFF") is None
    for bad in ("0", "-3", "often"):
        with pytest.raises(argparse.ArgumentTypeError, match="integer"):
            oldest_every(bad)

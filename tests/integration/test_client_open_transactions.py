"""`join_open_transactions`: a blocking enqueue given no connection joins the transaction a
registered provider names (what the Django contrib registers for atomic() blocks)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import tenure
from tenure.model.jobs import JobSpec
from tenure.producer.client_support import join_open_transactions


def committed(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM tenure.jobs").fetchone()
    assert row is not None
    return int(row[0])


class Ambient:
    """A framework's transaction, opened out of the client's sight: `conn` in a transaction, or none."""

    def __init__(self) -> None:
        self.conn: psycopg.Connection[Any] | None = None
        self.asked = 0

    @contextlib.contextmanager
    def provider(self, client: tenure.SyncClient) -> Iterator[psycopg.Connection[Any] | None]:
        self.asked += 1
        yield self.conn


@pytest.fixture
def ambient() -> Iterator[Ambient]:
    ambient = Ambient()
    remove = join_open_transactions(ambient.provider)
    yield ambient
    remove()


def test_enqueue_joins_the_open_transaction_and_rolls_back_with_it(dsn: str, ambient: Ambient) -> None:
    """enqueue, enqueue_many and enqueue_copy write in the open transaction: its rollback leaves no job."""
    with tenure.SyncClient(dsn) as client, psycopg.connect(dsn) as conn:
        ambient.conn = conn
        client.enqueue("t", {"n": 1}, queue="q")
        client.enqueue_many([JobSpec(task="t", queue="q"), JobSpec(task="t", queue="q")])
        client.enqueue_copy([JobSpec(task="t", queue="q")] * 3)
        assert committed(dsn) == 0, "a job was committed outside the open transaction"
        conn.rollback()
    assert committed(dsn) == 0
    assert ambient.asked == 3


def test_enqueue_commits_with_the_open_transaction(dsn: str, ambient: Ambient) -> None:
    """A job enqueued in the open transaction is committed by that transaction's commit."""
    with tenure.SyncClient(dsn) as client, psycopg.connect(dsn) as conn:
        ambient.conn = conn
        job = client.enqueue("t", {"n": 1}, queue="q")
        assert committed(dsn) == 0
        conn.commit()
        ambient.conn = None
        assert client.get_job(job.id) is not None
    assert committed(dsn) == 1


def test_no_open_transaction_leaves_the_pool_to_commit(dsn: str, ambient: Ambient) -> None:
    """With no transaction open (the provider yields None), the client's own pool commits at once."""
    with tenure.SyncClient(dsn) as client:
        client.enqueue("t", {"n": 1}, queue="q")
    assert committed(dsn) == 1
    assert ambient.asked == 1


def test_an_explicit_connection_is_not_second_guessed(dsn: str, ambient: Ambient) -> None:
    """enqueue(conn=...) uses that connection without asking any provider."""
    with tenure.SyncClient(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
        client.enqueue("t", {"n": 1}, queue="q", conn=conn)
    assert committed(dsn) == 1
    assert ambient.asked == 0


def test_a_refusing_provider_stops_the_enqueue_before_it_writes(dsn: str) -> None:
    """A provider that refuses (a transaction it cannot join) fails the enqueue; nothing is written."""

    @contextlib.contextmanager
    def refuse(client: tenure.SyncClient) -> Iterator[psycopg.Connection[Any] | None]:
        raise tenure.ConfigurationError("cannot join")
        yield None

    remove = join_open_transactions(refuse)
    try:
        with tenure.SyncClient(dsn) as client, pytest.raises(tenure.ConfigurationError, match="cannot join"):
            client.enqueue("t", {"n": 1}, queue="q")
    finally:
        remove()
    assert committed(dsn) == 0

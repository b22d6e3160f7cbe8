# Generated from src/tenure/db/fetch.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""Running one statement and reading its rows: as dicts inside the query classes, or as the typed
rows that leave them. Written once, async; tools/async_to_sync.py writes its blocking twin
(tenure.db.sync.fetch)."""

from __future__ import annotations

from typing import Any, TypeVar

from psycopg import Connection
from psycopg.rows import class_row, dict_row, tuple_row

Row = dict[str, Any]
RowType = TypeVar("RowType")


def fetch(conn: Connection[Any], query: str, params: dict[str, Any]) -> list[Row]:
    """The rows `query` gives for `params`; none for a statement that returns nothing."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def fetch_first(conn: Connection[Any], query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """The first row `query` gives for `params`, as a tuple in its columns' order (None: no row).
    For a statement on every enqueue's path: a dict row's column names are made anew for each
    result, about 10 us of the client's CPU an enqueue."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, params)
        return cur.fetchone()


def fetch_as(conn: Connection[Any], row: type[RowType], query: str, params: dict[str, Any]) -> list[RowType]:
    """The rows `query` gives for `params`, each a `row` built from its columns by name: a column
    the row type does not name, or a field no column fills, fails at once."""
    with conn.cursor(row_factory=class_row(row)) as cur:
        cur.execute(query, params)
        return cur.fetchall()

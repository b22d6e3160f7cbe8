"""The array parameters the hot statements send as text (tenure.db.arrays) reach PostgreSQL as
exactly the values given, whatever characters they hold."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import AsyncConnection

from tenure.db.arrays import bigint_array, float8_array, text_array

#: Task names are text without NUL (PostgreSQL's text cannot hold it).
NAMES = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)
AWKWARD = ["", "NULL", "null", "a,b", "{x}", 'say "hi"', "back\\slash", " padded ", "ta\tb", "naïve ✓"]


async def read_back(db: AsyncConnection[Any], literal: str, kind: str) -> list[Any]:
    row = await (await db.execute(f"SELECT %s::{kind}", [literal])).fetchone()
    assert row is not None
    return list(row[0])


async def test_awkward_task_names_arrive_as_themselves(db: AsyncConnection[Any]) -> None:
    """Empty strings, the word NULL, commas, braces, quotes, backslashes, spaces and non-ASCII
    text each arrive as the same string, in order."""
    assert await read_back(db, text_array(AWKWARD), "text[]") == AWKWARD
    assert await read_back(db, text_array([]), "text[]") == []


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(names=st.lists(NAMES, max_size=6))
async def test_any_task_names_arrive_as_themselves(db: AsyncConnection[Any], names: list[str]) -> None:
    """Any list of strings PostgreSQL's text can hold round-trips through text_array."""
    assert await read_back(db, text_array(names), "text[]") == names


async def test_numbers_arrive_exactly_and_infinite_ones_are_refused(db: AsyncConnection[Any]) -> None:
    """Floats round-trip bit for bit (repr), integers up to bigint's bounds too; an infinite or
    NaN lease is refused before anything is sent."""
    floats = [30.0, 0.1, 1e-05, 86400.5, 1 / 3]
    assert await read_back(db, float8_array(floats), "float8[]") == floats
    ints = [1, -(2**63), 2**63 - 1]
    assert await read_back(db, bigint_array(ints), "bigint[]") == ints
    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError, match="not a finite number"):
            float8_array([bad])

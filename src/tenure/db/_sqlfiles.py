"""Reads the named sections of the .sql files shipped with Tenure."""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
SCHEMA_PLACEHOLDER = "__schema__"


def quote_schema(schema: str) -> str:
    return sql.Identifier(schema).as_string(None)


@functools.cache
def _raw_sections() -> dict[str, str]:
    return read_sections("tenure.db", "sql")


def read_sections(package: str, folder: str) -> dict[str, str]:
    """The `-- name:` sections of every .sql file in `folder` of `package`, by name."""
    sections: dict[str, str] = {}
    for entry in resources.files(package).joinpath(folder).iterdir():
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        parts = _NAME.split(text)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in sections:
                raise RuntimeError(f"query {name!r} is defined twice")
            sections[name] = _without_comment_lines(body).strip()
    return sections


def _without_comment_lines(body: str) -> str:
    """The section without its whole-line `--` comments: they are for the reader of the .sql
    file, and psycopg caches the parsing of a query's placeholders only for texts of at most
    4,096 bytes (its MAX_CACHED_STATEMENT_LENGTH), which the claim's comments took it past. Each
    line's indentation goes too, for the same reason: no named query holds a string literal or a
    dollar-quoted body that spans lines, where it would matter."""
    return "\n".join(line.strip() for line in body.splitlines() if not line.lstrip().startswith("--"))


def plain_queries() -> dict[str, str]:
    """Named queries that do not mention the schema (the transaction runner's)."""
    return {name: body for name, body in _raw_sections().items() if SCHEMA_PLACEHOLDER not in body}


@functools.cache
def named_queries(schema: str) -> dict[str, str]:
    """All named queries with the schema name substituted, loaded once per schema."""
    quoted = quote_schema(schema)
    return {name: body.replace(SCHEMA_PLACEHOLDER, quoted) for name, body in _raw_sections().items()}


def schema_file(name: str, schema: str) -> str:
    """A whole DDL file (schema.sql or a migration) with the schema name substituted."""
    path = resources.files("tenure.db").joinpath(name)
    return path.read_text(encoding="utf-8").replace(SCHEMA_PLACEHOLDER, quote_schema(schema))


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, relative path) of every numbered migration, in order."""
    found = []
    for entry in resources.files("tenure.db").joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), f"migrations/{entry.name}"))
    return sorted(found)

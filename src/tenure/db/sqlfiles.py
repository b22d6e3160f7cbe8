"""Reads the named sections of the .sql files shipped with Tenure."""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

_SECTION = re.compile(r"^-- (name|part): (\w+)\s*$", re.MULTILINE)
_PART = re.compile(r"__part_(\w+)__")
SCHEMA_PLACEHOLDER = "__schema__"


def quote_schema(schema: str) -> str:
    return sql.Identifier(schema).as_string(None)


def _raw_sections() -> dict[str, str]:
    return package_queries("tenure.db")


def read_sections(package: str, folder: str) -> dict[str, str]:
    """The `-- name:` sections of every .sql file in `folder` of `package`, by name.

    A `-- part:` section is no query: it is one rule several queries share (the claim family's
    idea of a claimable job, the lease a claim takes), written once and put in place of
    `__part_<name>__` wherever a query, or another part, says so."""
    sections: dict[str, str] = {}
    parts: dict[str, str] = {}
    for entry in sorted(resources.files(package).joinpath(folder).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        pieces = _SECTION.split(text)
        for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
            found = parts if kind == "part" else sections
            if name in sections or name in parts:
                raise RuntimeError(f"{kind} {name!r} is defined twice")
            found[name] = _without_comment_lines(body).strip()
    used: set[str] = set()
    resolved = {name: _with_parts(body, parts, used, ()) for name, body in sections.items()}
    if unused := sorted(set(parts) - used):
        raise RuntimeError(f"parts {unused} are defined in {package}/{folder} and used by no query")
    return resolved


def _with_parts(body: str, parts: dict[str, str], used: set[str], within: tuple[str, ...]) -> str:
    def put(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in parts:
            raise RuntimeError(f"part {name!r} is used but not defined")
        if name in within:
            raise RuntimeError(f"part {name!r} includes itself")
        used.add(name)
        return _with_parts(parts[name], parts, used, (*within, name))

    return _PART.sub(put, body)


def _without_comment_lines(body: str) -> str:
    """The section without its whole-line `--` comments: they are for the reader of the .sql
    file, and psycopg caches the parsing of a query's placeholders only for texts of at most
    4,096 bytes (its MAX_CACHED_STATEMENT_LENGTH), which the claim's comments took it past. Each
    line's indentation goes too, for the same reason: no named query holds a string literal or a
    dollar-quoted body that spans lines, where it would matter."""
    return "\n".join(line.strip() for line in body.splitlines() if not line.lstrip().startswith("--"))


@functools.cache
def package_queries(package: str, schema: str | None = None) -> dict[str, str]:
    """The named queries of `package`'s sql/ folder (read once), with `schema` put in place of
    the schema placeholder when given: the one loader every package's queries come from."""
    sections = read_sections(package, "sql")
    if schema is None:
        return sections
    quoted = quote_schema(schema)
    return {name: body.replace(SCHEMA_PLACEHOLDER, quoted) for name, body in sections.items()}


def plain_queries() -> dict[str, str]:
    """Named queries that do not mention the schema (the transaction runner's)."""
    return {name: body for name, body in _raw_sections().items() if SCHEMA_PLACEHOLDER not in body}


def named_queries(schema: str) -> dict[str, str]:
    """Tenure's own named queries with the schema name substituted, loaded once per schema."""
    return package_queries("tenure.db", schema)


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

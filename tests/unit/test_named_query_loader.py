"""The named query loader: every query name unique and loadable, the schema substituted (no database)."""

from __future__ import annotations

import re
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

import tenure.db.queries as queries_module
from tenure.db.migrate import NO_TRANSACTION, latest_version, statements_of
from tenure.db.sqlfiles import (
    SCHEMA_PLACEHOLDER,
    migration_files,
    named_queries,
    plain_queries,
    quote_schema,
    read_sections,
    schema_file,
)

NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def sql_files() -> list[Path]:
    folder = resources.files("tenure.db").joinpath("sql")
    return sorted(Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".sql"))


def test_every_query_name_is_defined_exactly_once() -> None:
    """No two `-- name:` sections across the shipped .sql files share a name."""
    names = Counter(n for path in sql_files() for n in NAME.findall(path.read_text(encoding="utf-8")))
    assert names, "no named queries found"
    assert [n for n, count in names.items() if count > 1] == []
    assert set(named_queries("tenure")) == set(names)


def test_every_query_is_non_empty_and_fully_substituted() -> None:
    """Each named query has a body, and none keeps the schema placeholder once a schema is given."""
    loaded = named_queries("my_jobs")
    for name, body in loaded.items():
        assert body.strip(), name
        assert SCHEMA_PLACEHOLDER not in body, name
        assert "-- name:" not in body, f"{name} swallowed the next section"
    assert '"my_jobs".jobs' in loaded["job_claim"]
    assert "FOR UPDATE SKIP LOCKED" in loaded["job_claim"]


def test_schema_name_is_quoted_as_an_identifier() -> None:
    """The schema is inserted as a quoted identifier, so names are never spliced in raw."""
    assert quote_schema("tenure") == '"tenure"'
    assert quote_schema('we"ird') == '"we""ird"'
    assert '"other".jobs' in named_queries("other")["job_get"]
    assert named_queries("a") is named_queries("a")  # loaded once per schema


def test_every_query_the_code_uses_exists() -> None:
    """Every name Queries looks up is defined in the .sql files, and every defined query is used."""
    source = Path(queries_module.__file__).read_text(encoding="utf-8")
    used = set(re.findall(r'_sql\["(\w+)"\]', source))
    defined = set(named_queries("tenure"))
    assert used - defined == set()
    package = Path(queries_module.__file__).parent.parent
    callers = "".join(f.read_text(encoding="utf-8") for f in package.rglob("*.py"))
    unused = {n for n in defined if f'"{n}"' not in callers}
    assert unused == set()


def test_plain_queries_are_the_schema_independent_ones() -> None:
    """The transaction runner's queries mention no schema and are among the named queries."""
    plain = plain_queries()
    assert {"txn_isolation_serializable", "txn_lock_timeout"} <= set(plain)
    assert all(SCHEMA_PLACEHOLDER not in body for body in plain.values())
    assert "job_claim" not in plain


def test_ddl_files_substitute_the_schema_everywhere() -> None:
    """schema.sql and every migration load with the schema substituted and no placeholder left."""
    for name in ["schema.sql", *(path for _, _, path in migration_files())]:
        text = schema_file(name, "s2")
        assert SCHEMA_PLACEHOLDER not in text, name
        # No table is named without its schema (a comment may still speak of jobs).
        unqualified = re.search(r"\b(?:TABLE|ON|INTO|FROM|JOIN|UPDATE)\s+(?:ONLY\s+)?jobs\b", text)
        assert unqualified is None, (name, unqualified)


def test_migrations_are_numbered_uniquely_from_one() -> None:
    """Migration versions start at 1 and ascend with no duplicate; the latest is the highest.

    Gaps are allowed: numbers are reserved when work starts, and branches land in any order.
    """
    versions = [v for v, _, _ in migration_files()]
    assert versions[0] == 1 and versions == sorted(set(versions))
    assert latest_version() == versions[-1]


def test_no_transaction_migrations_split_into_plain_statements() -> None:
    """A migration marked no-transaction splits into its statements, comments dropped; dollar
    quoting, which the split cannot follow, is refused."""
    marked = [path for _, _, path in migration_files() if schema_file(path, "s").startswith(NO_TRANSACTION)]
    assert marked, "migration 0006 builds its index CONCURRENTLY"
    for path in marked:
        statements = statements_of(schema_file(path, "s"))
        assert statements and all(not s.startswith("--") and ";" not in s for s in statements), path
    assert statements_of("-- c\nDROP INDEX a;\n-- d\nCREATE INDEX b ON t (x);\n") == [
        "DROP INDEX a",
        "CREATE INDEX b ON t (x)",
    ]
    with pytest.raises(ValueError, match="dollar quoting"):
        statements_of("DO $$ BEGIN END $$;")


def test_every_named_query_fits_psycopg_s_query_cache() -> None:
    """Each query, comments dropped, is short enough for psycopg to cache the parsing of its
    placeholders (over 4,096 bytes every execution parses it again: a tenth of a worker's CPU
    went there when the claim was 4,291 bytes)."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    too_long = {
        name: len(text.encode())
        for name, text in named_queries("tenure").items()
        if len(text.encode()) > MAX_CACHED_STATEMENT_LENGTH
    }
    assert not too_long, f"over {MAX_CACHED_STATEMENT_LENGTH} bytes: {too_long}"


def test_whole_line_comments_are_dropped_and_the_statement_kept() -> None:
    """A section's `--` comment lines are left out of the query text; its SQL lines are not."""
    claim = named_queries("tenure")["job_claim"]
    assert not any(line.lstrip().startswith("--") for line in claim.splitlines())
    assert "FOR UPDATE" in claim and "SKIP LOCKED" in claim


def test_no_named_query_holds_text_across_lines() -> None:
    """The loader strips each line's indentation: safe only while no string literal or dollar
    quote spans lines, which this checks of every named query (quotes balance on each line)."""
    from tenure.db.sqlfiles import read_sections

    for package, folder in (
        ("tenure.db", "sql"),
        ("tenure.ops.dashboard", "sql"),
        ("tenure.lab.bench", "sql"),
        ("tenure.lab.soak", "sql"),
        ("tenure.ops.demo", "sql"),
        ("tenure.security", "sql"),
    ):
        for name, body in read_sections(package, folder).items():
            for line in body.splitlines():
                code = line.split("--", 1)[0] if line.count("'") % 2 == 0 else line
                assert code.count("'") % 2 == 0 and "$$" not in code, (package, name, line)


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> str:
    """A throwaway package holding one .sql file, importable by a name of its own."""
    name = f"sqlpkg_{abs(hash(tmp_path))}"
    folder = tmp_path / name
    (folder / "sql").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "sql" / "one.sql").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_part_is_written_once_and_put_in_every_query_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`__part_x__` becomes part x's body (parts within parts too), without its comments."""
    package = _package(
        tmp_path,
        monkeypatch,
        "-- part: due\n-- why it is due\nrun_at <= now() AND __part_live__\n"
        "-- part: live\nstate = 'pending'\n"
        "-- name: first\nSELECT 1 FROM jobs WHERE __part_due__;\n"
        "-- name: second\nUPDATE jobs SET x = 1 WHERE __part_due__ FOR UPDATE SKIP LOCKED;\n",
    )
    sections = read_sections(package, "sql")
    assert set(sections) == {"first", "second"}
    assert sections["first"] == "SELECT 1 FROM jobs WHERE run_at <= now() AND state = 'pending';"
    assert "WHERE run_at <= now() AND state = 'pending' FOR UPDATE" in sections["second"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-- name: q\nSELECT __part_nowhere__;\n", "used but not defined"),
        ("-- part: p\nx\n-- name: q\nSELECT 1;\n", "used by no query"),
        ("-- part: p\n__part_p__\n-- name: q\nSELECT __part_p__;\n", "includes itself"),
        ("-- part: p\nx\n-- name: p\nSELECT __part_p__;\n", "defined twice"),
    ],
)
def test_a_part_missing_unused_circular_or_doubled_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, problem: str
) -> None:
    """The loader refuses a .sql folder whose parts do not resolve to one body each, naming why."""
    with pytest.raises(RuntimeError, match=problem):
        read_sections(_package(tmp_path, monkeypatch, text), "sql")


CLAIM_FAMILY = ("job_claim", "job_claim_by_priority", "job_claim_limited")


def test_every_claim_shares_the_claim_family_s_rules() -> None:
    """The plain claim (both forms) and the limited claim hold the same claimable predicate, lease
    and columns, and each locks what it takes with SKIP LOCKED."""
    queries = named_queries("tenure")
    for shared in ("c.state = 'pending'", "lease_token = j.lease_token + 1", "clock.now AS db_now"):
        assert all(shared in queries[claim] for claim in CLAIM_FAMILY), shared
    for claim in CLAIM_FAMILY:
        assert "SKIP LOCKED" in queries[claim] and "__part_" not in queries[claim]


def test_the_plain_claim_without_an_oldest_share_is_its_by_priority_lane_alone() -> None:
    """job_claim_by_priority is job_claim's by-priority lane and lease, with no oldest lane."""
    queries = named_queries("tenure")
    two_lanes, one_lane = queries["job_claim"], queries["job_claim_by_priority"]
    assert "oldest AS (" in two_lanes and "oldest" not in one_lane
    lease = two_lanes[two_lanes.index('UPDATE "tenure".jobs j') :]
    assert one_lane.endswith(lease)


FENCED_WRITES = (
    "job_complete_many",
    "lease_extend_many",
    "lease_release_many",
    "job_snooze",
    "effect_begin",
    "effect_reconciled",
)


def test_every_fenced_write_holds_the_one_lease_fence() -> None:
    """The writes after a claim all carry the same fence (running, this owner, lease not run
    out by the database's clock), written once as a part, so no statement can drift from it."""
    queries = named_queries("tenure")
    fence = "j.state::text = 'running'\nAND j.lease_owner = %(owner)s\nAND j.lease_expires_at > clock.now"
    for name in FENCED_WRITES:
        assert fence in queries[name], name

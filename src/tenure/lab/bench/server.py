"""The server under test: one scratch database per contender, its settings, its cost counters."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tenure import ConfigurationError, Tenure
from tenure.db.connect import connect
from tenure.lab.bench.queries import fetch
from tenure.ops.demo.database import with_database
from tenure.ops.demo.queries import database_statement

SCHEMA = "tenure"


class Databases:
    """Creates `tenure_bench_<pid>_<name>` databases and drops them all at the end."""

    def __init__(self, server_dsn: str) -> None:
        self.server_dsn = server_dsn
        self.prefix = f"tenure_bench_{os.getpid()}_"
        self.created: list[str] = []

    async def create(self, name: str, *, migrated: bool = False) -> str:
        dbname = self.prefix + name
        async with await connect(self.server_dsn) as admin:
            await admin.execute(database_statement("demo_database_drop", dbname))
            await admin.execute(database_statement("demo_database_create", dbname))
        self.created.append(dbname)
        dsn = with_database(self.server_dsn, dbname)
        if migrated:
            await Tenure(dsn, schema=SCHEMA).migrate()
        return dsn

    async def drop_all(self) -> None:
        async with await connect(self.server_dsn) as admin:
            for dbname in self.created:
                await admin.execute(database_statement("demo_database_drop", dbname))
        self.created.clear()


async def server_settings(dsn: str) -> dict[str, str]:
    async with await connect(dsn) as conn:
        rows = await fetch(conn, SCHEMA, "bench_server_settings")
    return {r["name"]: _with_unit(r["setting"], r["unit"]) for r in rows}


def _with_unit(setting: str, unit: str | None) -> str:
    if unit == "8kB":
        return f"{int(setting) * 8 // 1024}MB"
    return f"{setting}{unit or ''}"


@dataclass
class CostMeter:
    """WAL bytes (server-wide) and commits (this database) between start() and stop()."""

    dsn: str
    lsn: str = ""
    commits: int = 0

    async def start(self) -> None:
        async with await connect(self.dsn) as conn:
            row = (await fetch(conn, SCHEMA, "bench_counters"))[0]
        self.lsn, self.commits = str(row["lsn"]), int(row["xact_commit"])

    async def stop(self) -> tuple[int, int]:
        """(wal bytes, commits); call after the worker processes exited so their stats are flushed."""
        async with await connect(self.dsn) as conn:
            await fetch(conn, SCHEMA, "bench_clear_snapshot")
            wal = (await fetch(conn, SCHEMA, "bench_wal_bytes_since", lsn=self.lsn))[0]["bytes"]
            row = (await fetch(conn, SCHEMA, "bench_counters"))[0]
        # start()'s own read is one of them (its stats are flushed when its connection closes).
        return int(wal), int(row["xact_commit"]) - self.commits - 1


async def check_server(dsn: str) -> None:
    """Fails early, with the fix, if the DSN cannot create databases."""
    async with await connect(dsn) as conn:
        rows = await fetch(conn, SCHEMA, "bench_can_create_databases")
    if not rows or not rows[0]["ok"]:
        raise ConfigurationError(
            "the benchmark creates scratch databases: give a --dsn whose role has CREATEDB"
        )

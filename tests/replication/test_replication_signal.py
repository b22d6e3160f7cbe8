"""`tenure status`, `tenure check`, the dashboard and the metrics say when the primary
acknowledges commits without a synchronous standby: standbys streaming asynchronously, a
replication slot kept for a standby that is gone, commits waiting for an absent synchronous
standby. A single server without replication is no alarm, and a synchronous standby none."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import psycopg
import pytest
from _servers import LOCAL, Server, primary
from starlette.testclient import TestClient

from conftest import migrated_database
from tenure.db.replication import Replication, ReplicationState
from tenure.ops.cli import main
from tenure.ops.dashboard import create_app
from tenure.ops.metrics import DatabaseCollector


def check(capsys: pytest.CaptureFixture[str], dsn: str) -> tuple[int, dict[str, object], str]:
    """`tenure check --json` and `tenure status` on `dsn`: exit code, the check's JSON, status text."""
    code = main(["check", "--dsn", dsn, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert main(["status", "--dsn", dsn]) == 0
    return code, report, " ".join(capsys.readouterr().out.split())


def metrics(dsn: str) -> dict[str, float]:
    collector = DatabaseCollector(dsn)
    try:
        return {
            s.name + "".join(f"{{{v}}}" for v in s.labels.values()): s.value
            for family in collector.collect()
            for s in family.samples
            if s.name.startswith(("tenure_db_replication", "tenure_db_commits", "tenure_db_synchronous"))
        }
    finally:
        collector.close()


def overview_problems(dsn: str) -> str:
    with TestClient(create_app(dsn), base_url="http://127.0.0.1") as http:
        page = http.get("/overview/live")
    assert page.status_code == 200
    return page.text.split('<section class="problems">')[1].split("</section>")[0]


def test_every_verdict_from_the_settings_and_standbys_seen() -> None:
    """The verdict of each combination a primary can be in."""

    def state(names: str = "", commit: str = "on", visible: bool = True, **counts: int) -> Replication:
        row = {"standbys": 0, "synchronous": 0, "physical_slots": 0, **counts}
        return ReplicationState(names, commit, False, visible, **row).verdict

    assert state() is Replication.NONE
    assert state(standbys=1) is Replication.ASYNCHRONOUS
    assert state(physical_slots=1) is Replication.ASYNCHRONOUS
    assert state("ANY 1 (a)", "local", standbys=1, synchronous=1) is Replication.ASYNCHRONOUS
    assert state("ANY 1 (a)", standbys=1, synchronous=1) is Replication.SYNCHRONOUS
    assert state("ANY 1 (a)", standbys=1) is Replication.WAITING
    assert state("ANY 1 (a)", physical_slots=1) is Replication.WAITING
    assert state("ANY 1 (a)", visible=False, standbys=1) is Replication.UNKNOWN
    assert ReplicationState("", "on", True, True, 0, 0, 0).verdict is Replication.STANDBY


def test_a_single_server_without_replication_is_no_alarm(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared test server: state none, `tenure check` OK, the unprotected gauge 0."""
    code, report, status = check(capsys, dsn)
    assert code == 0 and report["problems"] == [], report
    assert report["replication"]["state"] == "none"  # type: ignore[index]
    assert "replication: a single server without replication" in status
    assert metrics(dsn) == {
        "tenure_db_replication{none}": 1.0,
        "tenure_db_commits_unprotected": 0.0,
        "tenure_db_synchronous_standbys": 0.0,
    }


def test_standbys_without_a_synchronous_one_are_flagged_everywhere(
    pair: tuple[Server, Server], capsys: pytest.CaptureFixture[str]
) -> None:
    """A standby streaming asynchronously: check exits 1 naming it, status, the dashboard and
    the metrics say so; the same standby made synchronous clears every alarm."""
    main_server, _ = pair
    dsn = asyncio.run(migrated_database(main_server))
    code, report, status = check(capsys, dsn)
    assert code == 1, report
    assert report["replication"]["state"] == "asynchronous"  # type: ignore[index]
    [problem] = report["problems"]  # type: ignore[misc]
    assert problem.startswith("replication: no synchronous standby (synchronous_standby_names is empty")
    assert "a failover now can lose them" in status
    assert "no synchronous standby" in overview_problems(dsn)
    assert metrics(dsn)["tenure_db_commits_unprotected"] == 1.0
    assert metrics(dsn)["tenure_db_replication{asynchronous}"] == 1.0

    main_server.set("synchronous_standby_names", "standby_a")
    try:
        code, report, status = check(capsys, dsn)
        assert code == 0 and report["problems"] == [], report
        assert "replication: 1 synchronous standby(s) of 1 connected" in status
        assert "No problems" in overview_problems(dsn)
        assert metrics(dsn) == {
            "tenure_db_replication{synchronous}": 1.0,
            "tenure_db_commits_unprotected": 0.0,
            "tenure_db_synchronous_standbys": 1.0,
        }
    finally:
        main_server.set("synchronous_standby_names", "")


def test_a_slot_kept_for_a_gone_standby_and_commits_waiting_for_an_absent_one_are_flagged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No standby connected: a physical replication slot (as an HA engine keeps for its standby)
    with synchronous replication off is asynchronous; synchronous_standby_names naming a standby
    that is not there is waiting. `--allow-unprotected-commits` lets check pass."""
    with primary() as server:
        dsn = asyncio.run(migrated_database(server))
        with psycopg.connect(server.dsn(**LOCAL), autocommit=True) as conn:
            conn.execute("SELECT pg_create_physical_replication_slot('gone_standby')")
        code, report, _ = check(capsys, dsn)
        assert code == 1 and report["replication"]["state"] == "asynchronous", report  # type: ignore[index]
        assert main(["check", "--dsn", dsn, "--allow-unprotected-commits"]) == 0
        capsys.readouterr()
        server.set("synchronous_standby_names", "absent_standby")
        code, report, status = check(capsys, dsn)
        assert code == 1 and report["replication"]["state"] == "waiting", report  # type: ignore[index]
        assert "no synchronous standby is connected: commits wait until one is" in status


@pytest.fixture(autouse=True)
def _quiet_width(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("COLUMNS", "200")
    yield

"""One line of the targets table: a figure, the baseline measured in the same run, their ratio,
the threshold, and the verdict. A target whose inputs were not measured in this run (its section
not selected, a peer not installed, a size the run does not reach) is "not measured", which is
not met. A figure shown beside its baseline with no threshold is "reported" once measured."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenure.lab.bench.rows import Rule, fmt, ratio

MET, NOT_MET, NOT_MEASURED, REPORTED = "met", "not met", "not measured", "reported"

Target = dict[str, Any]
Sections = dict[str, Any]


def target(
    name: str,
    threshold: str,
    value: float | None,
    unit: str,
    baseline: str,
    baseline_value: float | None,
    rule: Rule | None,
    note: str = "",
) -> Target:
    """`rule` decides met; None as value means not measured (with `note`)."""
    against = ratio(value, baseline_value)
    status = NOT_MEASURED
    if value is not None and rule is not None:
        status = MET if rule(value, against) else NOT_MET
    return {
        "target": name,
        "threshold": threshold,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": against,
        "status": status,
        "note": note,
    }


def reported(
    name: str, value: float | None, unit: str, baseline: str, baseline_value: float | None, note: str
) -> Target:
    """A figure shown beside its baseline with no threshold: reported once measured."""
    found = target(name, "reported", value, unit, baseline, baseline_value, None, note)
    return found | {"status": REPORTED} if value is not None else found


def why_missing(sections: Sections, *names: str) -> str:
    missing = [n for n in names if n not in sections]
    return f"section {', '.join(missing)} not run" if missing else ""


def jobs_label(size: str | int) -> str:
    return f"{int(size):,} jobs"


def print_targets(found: list[Target], console: Console) -> None:
    table = Table(title="Targets, against baselines measured in this run")
    for col in ("target", "value", "baseline", "ratio", "threshold", "status"):
        table.add_column(col, justify="right" if col in ("value", "ratio") else "left")
    for t in found:
        status = {MET: "[green]met[/green]", NOT_MET: "[red]not met[/red]"}.get(t["status"], t["status"])
        note = f"\n[dim]{escape(t['note'])}[/dim]" if t["note"] else ""
        table.add_row(
            escape(t["target"]) + note,
            f"{fmt(t['value'])} {t['unit']}" if t["value"] is not None else "-",
            escape(f"{t['baseline']} ({fmt(t['baseline_value'])})"),
            fmt(t["ratio"]),
            t["threshold"],
            status,
        )
    console.print(table)
    judged = [t for t in found if t["threshold"] != "reported"]
    met = sum(t["status"] == MET for t in judged)
    reported = sum(t["status"] == REPORTED for t in found)
    console.print(
        f"targets met: {met} of {len(judged)}; "
        f"{reported} of {len(found) - len(judged)} figures reported with no threshold"
    )


def tenure_beside_pgqueuer(
    at_size: dict[str, Any], otherwise: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Tenure's drain to set beside PgQueuer's best (`at_size`, the peers section's figures at one
    size): the one run in PgQueuer's own rounds, else `otherwise` (the throughput section's)."""
    beside: dict[str, Any] | None = at_size.get("tenure_beside")
    return otherwise if beside is None else beside


def tenure_setting(drained: dict[str, Any] | None) -> str:
    """Tenure's settings in a drain of a sweep (the throughput section's or the peers'); "" for
    a drain that names none."""
    if not drained or "claim_batch" not in drained:
        return ""
    return f"claim batch {drained['claim_batch']}, concurrency {drained['concurrency']}"


def setting_suffix(drained: dict[str, Any] | None, who: str = "") -> str:
    """' (<who>claim batch B, concurrency C)' after a figure's name, or "" when the drain names no
    setting."""
    named = tenure_setting(drained)
    return f" ({who}{named})" if named else ""

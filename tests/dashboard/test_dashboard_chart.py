"""The overview's charts: their geometry (no database)."""

from __future__ import annotations

from tenure.db.ops_rows import FinishedCount
from tenure.ops.dashboard.chart import HEIGHT, WIDTH, throughput_chart, trouble_chart
from tenure.ops.dashboard.queries import TroubleCount


def test_bars_stack_per_minute_scaled_to_the_busiest_minute_with_now_rightmost() -> None:
    """Succeeded stacks under dead in one minute; the busiest minute fills the height; minute 0 is
    at the right edge, minute 59 at the left; queues add up."""
    rows = [
        FinishedCount("a", "succeeded", 0, 6),
        FinishedCount("b", "succeeded", 0, 2),
        FinishedCount("a", "dead", 0, 2),
        FinishedCount("a", "succeeded", 59, 5),
        FinishedCount("a", "succeeded", 60, 99),  # outside the hour
    ]
    chart = throughput_chart(rows)
    assert chart.peak == 10 and chart.totals == {"succeeded": 13, "cancelled": 0, "dead": 2}
    now = [b for b in chart.bars if b.minutes_ago == 0]
    succeeded, dead = sorted(now, key=lambda b: -b.y)
    assert (succeeded.kind, succeeded.count, succeeded.height) == ("succeeded", 8, HEIGHT * 0.8)
    assert (dead.kind, dead.y, dead.height) == ("dead", 0.0, HEIGHT * 0.2)
    assert succeeded.x + succeeded.width <= WIDTH and succeeded.x > WIDTH - WIDTH / 60
    oldest = next(b for b in chart.bars if b.minutes_ago == 59)
    assert oldest.x < WIDTH / 60 and oldest.height == HEIGHT * 0.5


def test_an_idle_hour_draws_no_bar() -> None:
    """With nothing finished, there is no bar and no division by zero."""
    chart = throughput_chart([])
    assert chart.bars == [] and chart.peak == 0


def test_trouble_chart_stacks_retries_expiries_and_fenced_writes_from_the_audit_log() -> None:
    """Audit-log rows become one stack per minute of retries, lease expiries and fencing losses;
    other events are not drawn."""
    rows = [
        TroubleCount("retry", 3, 4),
        TroubleCount("lease_expired", 3, 1),
        TroubleCount("fencing_lost", 0, 2),
        TroubleCount("reprocess", 0, 50),
    ]
    chart = trouble_chart(rows)
    assert chart.totals == {"retry": 4, "lease_expired": 1, "fencing_lost": 2} and chart.peak == 5
    assert {(b.kind, b.minutes_ago, b.count) for b in chart.bars} == {
        ("retry", 3, 4),
        ("lease_expired", 3, 1),
        ("fencing_lost", 0, 2),
    }

"""The core benchmark's results table is rendered from typed rows (issue 19, item 6)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import core_report  # noqa: E402
from core_harness import QUICK  # noqa: E402


def test_rows_carry_the_values_targets_and_verdicts() -> None:
    results = {
        "jobctl": {"single": {"rate": 6000.0}, "batch": {"rate": 20000.0}},
        "huey": {"enqueue": {"rate": 3000.0}},
        "aps": {},
    }
    rows = {r.num: r for r in core_report.results_table(results, QUICK) if r.num in {"1a", "1b"}}
    assert (rows["1a"].jobctl, rows["1a"].huey, rows["1a"].ok) == (6000.0, 3000.0, True)
    assert rows["1b"].ok is False  # 20,000 < the 30,000 target
    assert rows["1a"].render().startswith("| 1a | durable enqueue, 1 job/request")
    assert "| 2.00\u00d7 |" in rows["1a"].render()  # jobctl / huey


def test_a_workload_without_a_value_has_no_verdict() -> None:
    rows = core_report.results_table({"jobctl": {}, "huey": {}, "aps": {}}, QUICK)
    assert rows and all(r.ok is None for r in rows)


def test_store_rows_show_before_and_after() -> None:
    shape = {"none_ms": 0.1, "few_ms": 0.5}
    store = {
        "small": shape,
        "big": {"none_ms": 0.3, "few_ms": 0.6},
        "rss_big": {"rss_mb": 200.0, "hwm_mb": 210.0},
        "rss_empty": {"rss_mb": 40.0},
    }
    none_due, few_due, rss = core_report.results_table({"w4": {"store": store}}, QUICK)[-3:]
    assert none_due.ok is False and few_due.ok is True  # 3x and 1.2x against <= 2x
    assert "0.100 \u2192 0.300 (3.00\u00d7)" in none_due.render()
    assert (rss.check_name, rss.ok) == ("4 daemon RSS", False)

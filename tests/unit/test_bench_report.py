"""The benchmarks' reports are rendered from typed results (issue 19, items 6 and 1 of
session 7): the core table from typed rows, and saved result files written before the
results were typed still render through the same renderer (``--from-json``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "bench"
SAVED = Path(__file__).parent / "bench_saved"
sys.path.insert(0, str(BENCH))

import _common as C  # noqa: E402
import bench_core  # noqa: E402
import core_report  # noqa: E402
import herd_report  # noqa: E402
import pg_report  # noqa: E402
import schedules_report  # noqa: E402
from core_harness import QUICK  # noqa: E402
from core_results import ClaimTimes, Lag, Results, Store, Throughput  # noqa: E402


def _rate(rate: float) -> Throughput:
    return {"rate": rate, "runs": [], "verified": True}


def _claims(none_ms: float, few_ms: float) -> ClaimTimes:
    return {
        "none_ms": none_ms,
        "few_ms": few_ms,
        "none_runs_ms": [],
        "few_runs_ms": [],
        "other_cores": [],
    }


def test_rows_carry_the_values_targets_and_verdicts() -> None:
    results: Results = {
        "jobctl": {"single": _rate(6000.0), "batch": _rate(20000.0)},
        "huey": {"enqueue": _rate(3000.0)},
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
    store: Store = {
        "small": _claims(0.1, 0.5),
        "fill_rate": 1.0,
        "big": _claims(0.3, 0.6),
        "rss_empty": {"rss_mb": 40.0, "hwm_mb": 40.0, "status_ms": 1.0},
        "rss_big": {"rss_mb": 200.0, "hwm_mb": 210.0, "status_ms": 1.0},
        "overdue": {
            "status_ms": 1.0,
            "promote_calls": 1,
            "promote_p50_ms": 1.0,
            "promote_max_ms": 1.0,
            "drain_s": 1.0,
            "steady_ms": 1.0,
            "steady_runs_ms": [],
        },
        "huge_n": 1,
        "huge_rate": 1.0,
        "huge": _claims(0.1, 0.1),
        "db_mb_per_million": 1.0,
    }
    none_due, few_due, rss = core_report.results_table({"w4": {"store": store}}, QUICK)[-3:]
    assert none_due.ok is False and few_due.ok is True  # 3x and 1.2x against <= 2x
    assert "0.100 \u2192 0.300 (3.00\u00d7)" in none_due.render()
    assert (rss.check_name, rss.ok) == ("4 daemon RSS", False)


def _saved(prefix: str) -> list[Path]:
    return sorted(SAVED.glob(f"{prefix}-*.json"))


@pytest.mark.parametrize("path", _saved("bench_core"), ids=lambda p: p.name)
def test_a_saved_core_run_still_renders(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file saved before the results were typed has every key its typed shape requires,
    and ``--from-json`` renders it (without touching docs/benchmarks.md)."""
    results = json.loads(path.read_text())["results"]
    for who in ("jobctl", "huey", "aps"):
        for workload, res in results[who].items():
            shape = Lag if workload == "lag" else Throughput
            assert shape.__required_keys__ <= res.keys(), (who, workload)
    assert bench_core.from_json(str(path), write=False) == 0
    section = capsys.readouterr().out
    assert section.startswith("<!-- bench_core:start -->")
    assert section.rstrip().endswith("<!-- bench_core:end -->")
    for workload, res in results["jobctl"].items():
        assert f"* jobctl {workload}: rate " in section
        assert C.fmt(res["rate"]) in section


@pytest.mark.parametrize("path", _saved("bench_schedules"), ids=lambda p: p.name)
def test_a_saved_schedules_run_still_renders(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = json.loads(path.read_text())["results"]
    shapes: dict[str, Any] = {
        "a": schedules_report.InProcess,
        "a_daemon": schedules_report.InDaemon,
        "b": schedules_report.RssResult,
        "c": schedules_report.NextResult,
        "d": schedules_report.ApiCreate,
    }
    for key, res in results.items():
        assert shapes[key].__required_keys__ <= res.keys(), key
    C.render_saved(
        str(path),
        schedules_report.report,
        schedules_report.Sizes,
        schedules_report.MARKS,
        write=False,
    )
    section = capsys.readouterr().out
    assert section.startswith(schedules_report.MARKS[0])
    assert "| a | materialize 100,000 due schedules in-process" in section
    assert f"{results['c']['median_ms']:.0f} | ≤ 300 ms |" in section


def test_a_failed_workload_is_named_in_the_report() -> None:
    results: Results = {"jobctl": {"single": {"error": "RuntimeError: boom"}}}
    section, checks = core_report.report(results, QUICK, "cmd", _MACHINE, 1.0)
    assert "* jobctl single: `RuntimeError: boom`" in section
    assert "| 1a | durable enqueue, 1 job/request, 8 clients (jobs/s) | failed" in section
    assert checks == []


_MACHINE = {
    k: "?" for k in ("date", "nproc", "cpu", "mem", "kernel", "python", "sqlite", "jobctl", "peers")
}


def test_a_herd_run_renders_from_its_typed_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_herd has no saved run here: a hand-made file of its typed shape (every
    required key of every workload) renders through ``--from-json``."""
    path = SAVED / "synthetic-bench_herd.json"
    results = json.loads(path.read_text())["results"]
    assert herd_report.DaemonHerd.__required_keys__ <= results["a"].keys()
    assert herd_report.EngineHerd.__required_keys__ <= results["b"].keys()
    C.render_saved(str(path), herd_report.report, herd_report.Sizes, herd_report.MARKS, False)
    section = capsys.readouterr().out
    assert "| b | 20,000 due in one second, in-process engine" in section
    assert "| 13,333 (1.5 s) | ≥ 10,000/s | **PASS** |" in section
    assert "| 5 / 40 / 90 | p99 ≤ 200 ms | **PASS** |" in section


def test_a_saved_pg_run_renders_its_targets_and_double_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench_pg's run of 2026-11-30 22:05 (the one in docs/benchmarks.md) renders through
    ``--from-json``: SQLite beside PostgreSQL, every ceiling run, the lag target."""
    path = SAVED / "bench_pg-20261130T220508.json"
    results = json.loads(path.read_text())["results"]
    assert pg_report.Lag.__required_keys__ <= results["lag"].keys()
    assert all(pg_report.Ceiling.__required_keys__ <= c.keys() for c in results["ceiling"])
    C.render_saved(str(path), pg_report.report, pg_report.Sizes, pg_report.MARKS, False)
    section = capsys.readouterr().out
    assert section.startswith(pg_report.MARKS[0]) and section.rstrip().endswith(pg_report.MARKS[1])
    assert "| 714 | 699 | ≥ 3,000 | **MISS** |" in section
    assert "runs 3,700, 4,331, 4,073" in section
    assert "| 6.0 / 130.1 / 262.0 | p99 ≤ 50 | **MISS** |" in section
    saved = json.loads(path.read_text())
    sz = pg_report.Sizes(**saved["sizes"])
    _, checks = pg_report.report(results, sz, "", saved["machine"], 0.0)
    assert ("0 double runs and 0 double fires", True) in checks


def test_the_spawn_report_reads_every_figure_from_its_run() -> None:
    import bench_spawn_e2e as S

    e2e: S.E2e = {
        "rate": 300.0,
        "started_s": 1.5,
        "daemon_us_per_job": 200.0,
        "helper_us_per_job": 100.0,
        "commands_us_per_job": 700.0,
    }
    run = S.SpawnRun(100, 0, 10, (1.0, 2.0, 3.0), {"posix_spawn, 16 in flight": 600.0})
    run.e2e = {"helper, own user": e2e, "inline, own user": e2e | {"rate": 150.0}}
    run.lags = {"helper": {"p50": 1.0, "p99": 2.0, "max": 3.0}}
    run.load_end = (4.0, 5.0, 6.0)
    text = S.render(run)
    assert text.startswith("load average at start 1.00 2.00 3.00;")
    assert "  lag  helper  10 jobs over 2 s: p50 1.0 ms, p99 2.0 ms, max 3.0 ms" in text
    assert (
        "ratios: helper e2e / posix_spawn 0.50 (target >= 0.75); helper / inline e2e 2.00" in text
    )
    assert "  huey: not installed" in text
    assert "daemon 200 us, helper 100 us, commands 700 us" in text
    assert text.endswith(
        "load average at end 4.00 5.00 6.00 (figures under load: re-run on a quiet machine)"
    )


def test_a_spawn_bench_waits_out_ext4s_window_after_a_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run within six minutes of a spawn bench's removal of its files measures ext4's
    scan past the freed inodes: the bench notes each removal and waits out the rest."""
    import time

    import bench_spawn_e2e as S

    stamp = tmp_path / "removed"
    slept: list[float] = []
    monkeypatch.setattr(S, "REMOVED_STAMP", stamp)
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(time, "time", lambda: 10_000.0)
    assert S.wait_inodes_quiet() == float("inf") and slept == []  # never removed
    S.remove_left()  # nothing to remove: no note
    assert not stamp.exists()
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    S.LEFT.append(run)
    S.remove_left()
    assert not run.exists() and stamp.read_text() == "10000\n"
    monkeypatch.setattr(time, "time", lambda: 10_100.0)
    assert S.wait_inodes_quiet(wait=False) == 100.0 and slept == []
    assert S.wait_inodes_quiet() == S.INODE_QUIET and slept == [S.INODE_QUIET - 100.0]
    monkeypatch.setattr(time, "time", lambda: 10_000.0 + S.INODE_QUIET + 1)
    assert S.wait_inodes_quiet() == S.INODE_QUIET + 1 and len(slept) == 1


def test_each_scripts_markers_hold_its_own_section_only() -> None:
    """A script rewrites everything between its markers: a hand-written section that
    slipped inside them (the audit trail once sat inside bench_retention's) would be lost
    on its next run."""
    import re

    text = C.DOC.read_text()
    sections = re.findall(r"<!-- (\w+):start -->(.*?)<!-- \1:end -->", text, re.S)
    assert {name for name, _ in sections} >= {
        "bench_core",
        "bench_schedules",
        "bench_herd",
        "bench_cli",
        "bench_retention",
        "bench_pg_store",
        "bench_pg",
    }
    for name, body in sections:
        headings = [line for line in body.splitlines() if line.startswith("## ")]
        assert len(headings) <= 1, (name, headings)


def test_a_postgresql_schedules_run_renders_its_own_table() -> None:
    """``bench_schedules --db postgresql://…`` writes a second table of the schedules
    section (its own markers, a sub-heading), so the SQLite table stays; a saved run from
    before the backend was recorded is SQLite's."""
    saved = json.loads((SAVED / "bench_schedules-20261130T182242.json").read_text())
    old = schedules_report.Sizes(**saved["sizes"])
    assert schedules_report.marks_for(old) == schedules_report.MARKS
    pg = schedules_report.Sizes(**saved["sizes"], backend="postgresql")
    assert schedules_report.marks_for(pg) == schedules_report.MARKS_PG
    machine = _MACHINE | {"libs": "?", "postgres": "server_version 15"}
    section, _ = schedules_report.report(saved["results"], pg, "cmd", machine, 1.0)
    assert section.startswith(schedules_report.MARKS_PG[0])
    assert section.rstrip().endswith(schedules_report.MARKS_PG[1])
    assert "\n### Schedules on PostgreSQL" in section
    assert "`PostgresStore.create_schedules`" in section
    assert "PostgreSQL on this machine: server_version 15." in section
    assert "| a | materialize 100,000 due schedules in-process" in section


def test_the_sched_view_classes_the_window_and_counts_commands_alive() -> None:
    """bench/spawn_sched.py: a ``perf sched timehist`` listing read into the window's
    classes, the commands alive at once, and what ran beside an idle CPU."""
    import spawn_sched as S

    listing = "\n".join(
        [
            "time cpu task name wait time sch delay run time",
            "[tid/pid] (msec) (msec) (msec)",
            "--------------- ------ ------------------------------ --------- ---------",
            "  100.002000 [0000]  python[500]             0.000  0.000  2.000",
            "  100.002000 [0001]  true[900]               0.000  0.000  1.000",
            "  100.004000 [0001]  <idle>                  0.000  0.000  2.000",
            "  100.004000 [0000]  python[501/500]         0.000  0.000  2.000",
            "  100.003000 [0000]  spawner mark[600]       0.000  1.500  1.000",
            "  100.004000 [0000]  kworker/0:1-ev[7]       0.000  0.000  0.500",
            "     not a line",
        ]
    )
    slices = S.parse(listing, daemon=500, helpers={600})
    assert [s.who for s in slices] == [
        "daemon loop",
        "commands",
        "idle",
        "daemon threads",
        "helper",
        "other",
    ]
    assert S.shares(slices)["idle"] == pytest.approx(2.0)
    dist = S.alive(slices, steps=400)
    # true[900] ran 1.001-1.002 s of a 100.000-100.004 window: a quarter of it
    assert dist[1] == pytest.approx(0.25, abs=0.01)
    assert dist[0] == pytest.approx(0.75, abs=0.01)
    beside = S.beside_idle(slices)  # CPU 1 idle 2-4 ms: CPU 0 ran the writer, helper, kworker
    assert beside["daemon threads"] == pytest.approx(2.0)
    assert beside["helper"] == pytest.approx(1.0)
    assert beside["other"] == pytest.approx(0.5)
    assert "daemon loop" not in beside
    # the helper was runnable 0.5-2.0 ms on CPU 0; CPU 1 idled from 2.0 ms: no overlap
    assert S.runnable_beside_idle(slices) == {}
    later = [*slices, S.Slice(100.0035, 100.004, 0, "helper", 600, 0.001)]  # waited 2.5-3.5 ms
    assert S.runnable_beside_idle(later) == {"helper": pytest.approx(1.0)}
    text = S.report(slices)
    assert text.startswith("window 0.0 s on 2 CPUs (8 ms of CPU):")
    assert "commands alive at once (share of the window): 0: 75%, 1: 25%" in text

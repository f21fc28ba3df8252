"""What ``bench_schedules`` produces and how it is reported: its sizes and targets, the
zones its schedules are spread over, one typed shape per workload's result, and the one
renderer of its section of docs/benchmarks.md.

The shapes are what ``bench/results/bench_schedules-*.json`` hold (``--from-json`` reads a
saved file back into them unchanged), so a key renamed here must stay readable there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import _common as C
from _common import JOBCTL_BIN, Failed, Rss, done, error_of, fmt

MARKS = ("<!-- bench_schedules:start -->", "<!-- bench_schedules:end -->")
#: The PostgreSQL run's table (``--db postgresql://…``), right after the SQLite one.
MARKS_PG = ("<!-- bench_schedules_pg:start -->", "<!-- bench_schedules_pg:end -->")

TARGETS = {
    "materialize": 20_000.0,
    "rss_mb": 150.0,
    "next_ms": 300.0,
    "read_ms": 50.0,
    "create": 20_000.0,
}


@dataclass(frozen=True)
class Sizes:
    schedules: int
    next_runs: int
    batch: int = 1000  # materialize(limit)
    backend: str = "sqlite"  # or "postgresql" (saved runs from before it: SQLite)


def marks_for(sz: Sizes) -> tuple[str, str]:
    """The markers of a run's section: one per backend, so each run rewrites only its own."""
    return MARKS if sz.backend == "sqlite" else MARKS_PG


FULL = Sizes(schedules=1_000_000, next_runs=10)
QUICK = Sizes(schedules=100_000, next_runs=5)

ZONES = (
    "UTC",
    "Asia/Tokyo",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Asia/Kolkata",
    "America/Los_Angeles",
    "Asia/Kathmandu",
    "America/Sao_Paulo",
    "Pacific/Auckland",
    "Europe/London",
    "Africa/Cairo",
)


class InProcess(TypedDict):
    """a: materializing N due schedules through an in-process ``SqliteStore``."""

    n: int
    distinct: int
    create_rate: float
    seconds: float
    rate: float
    created: int
    calls: int
    call_p50_ms: float
    call_max_ms: float
    verified: bool


class Reads(TypedDict):
    """r: the reads of the daemon of a, once it holds N schedules and N due jobs."""

    status_ms: float
    status_max_ms: float
    list50_ms: float
    list50_max_ms: float
    show_ms: float
    show_max_ms: float
    cli_status_ms: float
    cli_list50_ms: float
    cli_show_ms: float
    rss_before_walk_mb: float
    walk_s: float
    walked: int
    pages: int
    rss_walk_max_mb: float
    rss_after_walk_mb: float
    hwm_mb: float
    verified: bool


class InDaemon(TypedDict):
    """a, daemon: the same schedules materialized by a real daemon, timed from spawn."""

    spawn_to_ready: float
    spawn_to_all: float
    ready_to_all: float
    log_first_to_last: float
    log_rate: float
    logged: int
    jobs: int
    materializer: dict[str, Any] | None
    status_p50_ms: float
    status_max_ms: float
    list50_p50_ms: float
    list50_max_ms: float
    polls: int
    rss_during_max_mb: float
    rss_after_mb: float
    hwm_mb: float
    reads: Reads
    verified: bool
    rate: float


class RssSample(Rss):
    """b: one daemon's memory after ``event=ready`` and one status call."""

    status_ms: float
    ready_s: float
    schedules: int


class ListWalk(Rss):
    """b: what walking every schedule page left the daemon at."""

    seconds: float
    listed: int


class RssResult(TypedDict):
    """b: RSS of a daemon holding N schedules not yet due, against an empty one."""

    create_rate: float
    db_mb: float
    empty: RssSample
    full: RssSample
    list: ListWalk
    verified: bool


class NextResult(TypedDict):
    """c: wall time of ``jobctl next``, interpreter start-up included."""

    median_ms: float
    min_ms: float
    max_ms: float
    runs_ms: list[float]
    python_bare_ms: float
    bytecode: bool
    verified: bool


class ApiCreate(TypedDict):
    """d: N schedules created through ``POST /v1/schedules``, lists of 1,000."""

    seconds: float
    rate: float
    created: int
    requests: int
    cpu_us: float
    rss_mb: float
    hwm_mb: float
    verified: bool


class Results(TypedDict, total=False):
    """One run of the bench: each workload that ran, or why it failed."""

    a: InProcess | Failed
    a_daemon: InDaemon | Failed
    b: RssResult | Failed
    c: NextResult | Failed
    d: ApiCreate | Failed


def report(
    R: Results, sz: Sizes, cmd: str, info: dict[str, str], elapsed: float
) -> tuple[str, list[tuple[str, bool]]]:
    """The section of docs/benchmarks.md, and each target met or missed."""
    rows = C.Rows()
    a, ad, b, c, d = _done(R)
    n = sz.schedules
    if a is not None:
        _rows_a(rows, a, sz)
    if ad is not None:
        _rows_a_daemon(rows, ad, n)
        _rows_reads(rows, ad["reads"], n)
    if b is not None:
        rows.add(
            "b",
            f"daemon RSS with {n:,} schedules, after ready + status (MB)",
            f"{b['full']['rss_mb']:.0f}",
            "≤ 150 MB",
            b["full"]["rss_mb"] <= TARGETS["rss_mb"],
        )
    if c is not None:
        rows.add(
            "c",
            f'`jobctl next "0 6 * * *" --tz Asia/Tokyo`, median of {len(c["runs_ms"])} (ms)',
            f"{c['median_ms']:.0f}",
            "≤ 300 ms",
            c["median_ms"] <= TARGETS["next_ms"],
        )
    if d is not None:
        rows.add(
            "d",
            f"create {n:,} schedules through the API, lists of 1,000 (schedules/s)",
            fmt(d["rate"]),
            "≥ 20,000/s",
            d["rate"] >= TARGETS["create"],
        )
    if sz.backend == "sqlite":
        title = "Schedules (`bench/bench_schedules.py`)"
    else:
        title = "Schedules on PostgreSQL (`bench/bench_schedules.py --db postgresql://…`)"
    text = C.section(marks_for(sz), title, info, elapsed, cmd, rows, _notes(R, sz))
    if sz.backend != "sqlite":  # a second table of the same section: a sub-heading
        text = text.replace("\n## ", "\n### ", 1)
    return text, rows.checks


def _rows_a(rows: C.Rows, a: InProcess, sz: Sizes) -> None:
    rows.add(
        "a",
        f"materialize {sz.schedules:,} due schedules in-process, `materialize({sz.batch})` "
        "(schedules/s)",
        fmt(a["rate"]),
        "≥ 20,000/s",
        a["rate"] >= TARGETS["materialize"],
    )


def _rows_a_daemon(rows: C.Rows, ad: InDaemon, n: int) -> None:
    ms, rss = TARGETS["read_ms"], TARGETS["rss_mb"]
    rows.add(
        "a",
        f"materialize {n:,} due schedules in a real daemon, spawn → status counts {n:,} jobs (s)",
        f"{ad['spawn_to_all']:.1f} s ({fmt(ad['rate'])}/s)",
        "",
        None,
    )
    rows.add(
        "a",
        "`status` while the daemon materializes, p50 (ms)",
        f"{ad['status_p50_ms']:.1f}",
        "≤ 50 ms",
        ad["status_p50_ms"] <= ms,
    )
    rows.add(
        "a",
        "`schedules list --limit 50` (API) while it materializes, p50 (ms)",
        f"{ad['list50_p50_ms']:.1f}",
        "≤ 50 ms",
        ad["list50_p50_ms"] <= ms,
    )
    rows.add(
        "a",
        "daemon RSS while it materializes, max of samples (MB)",
        f"{ad['rss_during_max_mb']:.0f}",
        "≤ 150 MB",
        ad["rss_during_max_mb"] <= rss,
    )


def _rows_reads(rows: C.Rows, r: Reads, n: int) -> None:
    ms = TARGETS["read_ms"]
    rows.add(
        "r",
        f"`status` with {n:,} schedules + {n:,} due jobs, median (ms)",
        f"{r['status_ms']:.1f}",
        "≤ 50 ms",
        r["status_ms"] <= ms,
    )
    rows.add(
        "r",
        "`schedules list --limit 50` (API), median (ms)",
        f"{r['list50_ms']:.1f}",
        "≤ 50 ms",
        r["list50_ms"] <= ms,
    )
    rows.add("r", "`schedules show ID` (API), median (ms)", f"{r['show_ms']:.1f}", "", None)
    rows.add(
        "r",
        f"walk of all {r['walked']:,} schedules, pages of 1,000 (s)",
        f"{r['walk_s']:.1f}",
        "",
        None,
    )
    rows.add(
        "r",
        "daemon RSS during the walk, peak (MB)",
        f"{r['hwm_mb']:.0f}",
        "≤ 150 MB",
        r["hwm_mb"] <= TARGETS["rss_mb"],
    )


def _notes(R: Results, sz: Sizes) -> list[str]:
    """The details under the table, one bullet per workload that ran, in this order."""
    n = sz.schedules
    a, ad, b, c, d = _done(R)
    notes = []
    if ad is not None:
        notes.append(_note_reads(ad["reads"], n))
    if d is not None:
        notes.append(_note_d(d, n))
    if a is not None:
        notes.append(_note_a(a, sz))
    if ad is not None:
        notes.append(_note_a_daemon(ad, n, sz.backend))
    if b is not None:
        notes.append(_note_b(b, n))
    if c is not None:
        notes.append(_note_c(c))
    notes += [
        f"* **{key} failed**: `{e}`"
        for key, res in R.items()
        if isinstance(res, dict) and (e := error_of(res))
    ]
    return notes


def _done(
    R: Results,
) -> tuple[
    InProcess | None, InDaemon | None, RssResult | None, NextResult | None, ApiCreate | None
]:
    """Each workload's result, or None where it failed or did not run."""
    return (
        done(R.get("a")),
        done(R.get("a_daemon")),
        done(R.get("b")),
        done(R.get("c")),
        done(R.get("d")),
    )


def _note_reads(r: Reads, n: int) -> str:
    return (
        f"* **r, reads**: on the daemon of a, once it held {n:,} schedules and {n:,} due "
        f"jobs (their queue paused). API medians of 30 calls through the shipped client: "
        f"status {r['status_ms']:.1f} ms (max {r['status_max_ms']:.1f}), first page of 50 "
        f"schedules {r['list50_ms']:.1f} ms (max {r['list50_max_ms']:.1f}), schedule "
        f"detail {r['show_ms']:.1f} ms (max {r['show_max_ms']:.1f}). As CLI commands "
        f"(median of 5, interpreter start-up included): `jobctl status` "
        f"{r['cli_status_ms']:.0f} ms, `jobctl schedules list --limit 50` "
        f"{r['cli_list50_ms']:.0f} ms, `jobctl schedules show` {r['cli_show_ms']:.0f} ms. "
        f"Walk of every page (`limit=1000`, following `next_cursor`): {r['walked']:,} "
        f"schedules in {r['pages']} pages, {r['walk_s']:.1f} s; daemon RSS "
        f"{r['rss_before_walk_mb']:.0f} MB before, {r['rss_after_walk_mb']:.0f} MB after, "
        f"peak {r['hwm_mb']:.0f} MB (VmHWM since start). Checked: the walk saw every "
        f"schedule once: {r['verified']}."
    )


def _note_d(d: ApiCreate, n: int) -> str:
    return (
        f"* **d**: an empty daemon sent {n:,} schedules (the same mix of zones and cron "
        f"shapes, each its own command) as {d['requests']} lists of 1,000 "
        f"`POST /v1/schedules` through the shipped client (`Client.create_schedules`), "
        f"from 2 threads with a kept-alive connection each: {d['seconds']:.1f} s; daemon "
        f"CPU {d.get('cpu_us', float('nan')):.0f} µs a schedule (user + system, all its "
        f"threads); daemon RSS afterwards {d['rss_mb']:.0f} MB (peak {d['hwm_mb']:.0f}). "
        f"Checked: every item answered `created: true` and status counts {n:,}: "
        f"{d['verified']}."
    )


def _note_a(a: InProcess, sz: Sizes) -> str:
    n = sz.schedules
    store = "SqliteStore" if sz.backend == "sqlite" else "PostgresStore"
    return (
        f"* **a, in-process**: {n:,} schedules ({a['distinct']} distinct zone + cron "
        f"pairs over {len(ZONES)} zones: hourly, daily, weekday, weekly, monthly, "
        f"twice-daily, yearly, `*/5`, `*/15` …; default policy: misfire `once`, overlap "
        f"`skip`), each with exactly one occurrence in a 5-minute window, created through "
        f"`{store}.create_schedules`, lists of 1,000 ({fmt(a['create_rate'])} schedules/s)."
        f" The `FakeClock` is then set to the window's end and "
        f"`materialize({sz.batch})` is called until it reports 0 schedules: "
        f"{a['calls']} calls, {a['seconds']:.2f} s, p50 {a['call_p50_ms']:.0f} ms and max "
        f"{a['call_max_ms']:.0f} ms per call (each one fsync'd transaction). Checked: "
        f"{a['created']:,} jobs created, store counts {n:,} scheduled, no schedule left "
        f"due: {a['verified']}."
    )


def _note_a_daemon(ad: InDaemon, n: int, backend: str) -> str:
    how = "" if backend == "sqlite" else ", `CREATE DATABASE … TEMPLATE`"
    return (
        f"* **a, daemon**: a copy of the same database (taken before the in-process run{how}; "
        f"their queue paused so the daemon only materializes) given to `jobctl daemon`; "
        f"every occurrence is due at start-up. Ready {ad['spawn_to_ready']:.1f} s after "
        f"spawn; `GET /v1/status` (polled every 50 ms) counted {n:,} jobs "
        f"{ad['spawn_to_all']:.1f} s after spawn; the daemon log's first to last "
        f"`event=enqueued` line took {ad['log_first_to_last']:.1f} s "
        f"({fmt(ad['log_rate'])}/s). Status latency during it: p50 "
        f"{ad['status_p50_ms']:.0f} ms, max {ad['status_max_ms']:.0f} ms. RSS afterwards "
        f"{ad['rss_after_mb']:.0f} MB (peak {ad['hwm_mb']:.0f}). Checked with "
        f"`jobctl status --json`: {ad['jobs']:,} jobs, all scheduled, one log line each: "
        f"{ad['verified']}."
    )


def _note_b(b: RssResult, n: int) -> str:
    lst = b["list"]
    return (
        f"* **b**: {n:,} schedules first due tomorrow (DB {b['db_mb']:.0f} MB), daemon "
        f"ready in {b['full']['ready_s']:.1f} s; RSS {b['full']['rss_mb']:.0f} MB (peak "
        f"{b['full']['hwm_mb']:.0f}) against {b['empty']['rss_mb']:.0f} MB on an empty "
        f"database; status took {b['full']['status_ms']:.0f} ms. Not part of the target: "
        f"walking all {lst['listed']:,} (pages of 1,000 "
        f"`GET /v1/schedules?limit=1000&cursor=…`) took {lst['seconds']:.1f} s and left RSS "
        f"at {lst['rss_mb']:.0f} MB (peak {lst['hwm_mb']:.0f} MB)."
    )


def _note_c(c: NextResult) -> str:
    return (
        f"* **c**: `{JOBCTL_BIN} next …` as a subprocess, wall time including interpreter "
        f"start-up, after one untimed warm-up run"
        + (
            ", with bytecode available as after a `pip install` (jobctl's package "
            "byte-compiled with `compileall` first; the runs do not inherit "
            "`PYTHONDONTWRITEBYTECODE`)"
            if c["bytecode"]
            else ""
        )
        + "; runs (ms): "
        + ", ".join(f"{x:.0f}" for x in c["runs_ms"])
        + f". A bare `python -c pass` takes {c['python_bare_ms']:.0f} ms here."
    )

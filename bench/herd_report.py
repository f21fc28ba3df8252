"""What ``bench_herd`` produces and how it is reported: its sizes and targets, one typed
shape per workload's result, and the one renderer of its section of docs/benchmarks.md.

The shapes are what ``bench/results/bench_herd-*.json`` hold (``--from-json`` reads a
saved file back into them unchanged), so a key renamed here must stay readable there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import _common as C
from _common import Failed, done, error_of

MARKS = ("<!-- bench_herd:start -->", "<!-- bench_herd:end -->")
QUEUE = "herd"
TARGETS = {"engine_rate": 10_000.0, "status_p99_ms": 200.0}


@dataclass(frozen=True)
class Sizes:
    jobs: int
    concurrency: int = 64  # daemon executor (a)
    slots: int = 1000  # in-process instant executor (b)
    batch: int = 10_000  # jobs per enqueue request / store.insert call
    status_every: float = 0.1  # seconds between status calls (c)


FULL = Sizes(jobs=200_000)
QUICK = Sizes(jobs=20_000)


class StatusLatency(TypedDict):
    """c: ``GET /v1/status`` latency during the drain of a, and before it."""

    n: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    idle_n: int
    idle_p50_ms: float


class Truth(TypedDict):
    """c: whether the status answers taken during the drain told the truth."""

    samples: int
    during: int
    with_backlog: int
    counts_ok: bool
    bad_counts: int
    age_diff_max_ms: float
    age_err_max_ms: float
    missing_age: int
    age_monotonic: bool
    due_monotonic: bool
    first_due: int | None
    max_age: float | None
    honest: bool


class DaemonHerd(TypedDict):
    """a: a real daemon running N ``true`` jobs due at one instant."""

    n: int
    enqueue_s: float
    enqueue_rate: float
    late_enqueue: bool
    first_start_after_due: float
    last_start_after_due: float
    last_finish_after_due: float
    start_rate: float
    rate: float
    peak_start_per_s: int
    attempts: int
    succeeded: int
    daemon_cores: float
    rss_mb: float
    hwm_mb: float
    wall_to_done: float
    verified: bool
    status: StatusLatency
    probe_rate: float
    margin_s: float
    truth: Truth


class EngineHerd(TypedDict):
    """b: the engine in-process with an instant executor."""

    n: int
    slots: int
    fill_rate: float
    first_start_s: float
    last_start_s: float
    all_finished_s: float
    rate: float
    ticks: int
    claims: int
    claim_mean: float
    claim_max: int
    cores: float
    fenced: int
    verified: bool


class Results(TypedDict, total=False):
    """One run of the bench: each workload that ran, or why it failed."""

    a: DaemonHerd | Failed
    b: EngineHerd | Failed


def report(
    R: Results, sz: Sizes, cmd: str, info: dict[str, str], elapsed: float
) -> tuple[str, list[tuple[str, bool]]]:
    """The section of docs/benchmarks.md, and each target met or missed."""
    a, b = done(R.get("a")), done(R.get("b"))
    rows = C.Rows()
    if a is not None:
        _rows_a(rows, a, sz)
    if b is not None:
        _rows_b(rows, b, sz)
    if a is not None:
        _rows_c(rows, a)
    notes = []
    if a is not None:
        notes.append(_note_a(a, sz))
    if b is not None:
        notes.append(_note_b(b, sz))
    if a is not None:
        notes.append(_note_c(a, sz))
    notes += [
        f"* **{key} failed**: `{e}`"
        for key, res in R.items()
        if isinstance(res, dict) and (e := error_of(res))
    ]
    text = C.section(
        MARKS, "Thundering herd (`bench/bench_herd.py`)", info, elapsed, cmd, rows, notes
    )
    return text, rows.checks


def _rows_a(rows: C.Rows, a: DaemonHerd, sz: Sizes) -> None:
    rows.add(
        "a",
        f"{sz.jobs:,} × `true` due in one second, daemon `--concurrency "
        f"{sz.concurrency}`: due → last start (s)",
        f"{a['last_start_after_due']:.1f} s ({C.fmt(a['start_rate'])} starts/s)",
        "",
        None,
    )
    rows.add("a", "… jobs/s, first start → last finish", C.fmt(a["rate"]), "", None)


def _rows_b(rows: C.Rows, b: EngineHerd, sz: Sizes) -> None:
    rows.add(
        "b",
        f"{sz.jobs:,} due in one second, in-process engine, instant executor with "
        f"{sz.slots:,} slots: jobs/s (due → last start)",
        f"{C.fmt(b['rate'])} ({b['last_start_s']:.1f} s)",
        "≥ 10,000/s",
        b["rate"] >= TARGETS["engine_rate"],
    )


def _rows_c(rows: C.Rows, a: DaemonHerd) -> None:
    st, tr = a["status"], a["truth"]
    rows.add(
        "c",
        "`GET /v1/status` latency during the drain of (a), p50 / p99 / max (ms)",
        f"{st['p50_ms']:.0f} / {st['p99_ms']:.0f} / {st['max_ms']:.0f}",
        "p99 ≤ 200 ms",
        st["p99_ms"] <= TARGETS["status_p99_ms"],
    )
    rows.add(
        "c",
        "status honest during the drain (counts add up; oldest_due_age = real age)",
        "yes" if tr["honest"] else "no",
        "yes",
        tr["honest"],
    )


def _note_a(a: DaemonHerd, sz: Sizes) -> str:
    n = sz.jobs
    return (
        f"* **a**: one `jobctl daemon --concurrency {sz.concurrency}`; {n:,} jobs "
        f"(`true`, queue `{QUEUE}`) enqueued with `Client.enqueue_many`, "
        f"{sz.batch:,} per request, all with one `run_at` ({a['enqueue_s']:.1f} s, "
        f"{C.fmt(a['enqueue_rate'])} jobs/s; enqueue finished before the due instant: "
        f"{not a['late_enqueue']}). The due instant was chosen {a['margin_s']:.0f} s "
        f"ahead from one probe request of {sz.batch:,} jobs due in 2099 in queue `probe` "
        f"({C.fmt(a['probe_rate'])} jobs/s), which stay in the database. From the "
        f"attempts table (read-only, afterwards): first "
        f"start {a['first_start_after_due'] * 1000:.0f} ms after the due instant, last start "
        f"{a['last_start_after_due']:.1f} s, last finish {a['last_finish_after_due']:.1f} "
        f"s; peak {C.fmt(a['peak_start_per_s'])} starts in one second; the daemon used "
        f"{a['daemon_cores']:.2f} cores (its children not counted); RSS at the end "
        f"{a['rss_mb']:.0f} MB (peak {a['hwm_mb']:.0f}). Checked: {a['attempts']:,} "
        f"attempts, {a['succeeded']:,} succeeded, {n:,} distinct ids: {a['verified']}."
    )


def _note_b(b: EngineHerd, sz: Sizes) -> str:
    n = sz.jobs
    return (
        f"* **b**: `SqliteStore` + `AsyncStore` + `engine.timer.Timer` in one process "
        f"(uvloop), `FakeClock`. {n:,} jobs inserted with `store.insert` in batches of "
        f"{sz.batch:,} ({C.fmt(b['fill_rate'])} jobs/s), all with one `run_at`; the timer "
        f"sleeps until the clock is set to it. The executor is a stand-in with "
        f"{sz.slots:,} slots whose `start(claim)` awaits `AsyncStore.finish(SUCCEEDED)` "
        f"(batched into `store.finish_many`, as the real executor does) and then wakes "
        f"the timer. First start "
        f"{b['first_start_s'] * 1000:.0f} ms after the clock moved, last start "
        f"{b['last_start_s']:.2f} s, all finished {b['all_finished_s']:.2f} s; "
        f"{b['ticks']:,} timer ticks, {b['claims']:,} claims of {b['claim_mean']:.0f} jobs "
        f"on average (max {b['claim_max']}); the process used {b['cores']:.2f} cores. "
        f"Checked: every job started once and succeeded, none fenced: {b['verified']}."
    )


def _note_c(a: DaemonHerd, sz: Sizes) -> str:
    n = sz.jobs
    st, tr = a["status"], a["truth"]
    return (
        f"* **c**: a thread of the bench process calls `Client.status()` (one keep-alive "
        f"connection) every {sz.status_every * 1000:.0f} ms during (a); latency over the "
        f"{st['n']:,} calls between the due instant and the last finish "
        f"({st['errors']} errors); before the due instant, with nothing running, "
        f"status took {C.fmt(st['idle_p50_ms'])} ms (p50 of {st['idle_n']}). Honesty, over the "
        f"{tr['with_backlog']:,} answers taken "
        f"while jobs were still due: the job counts summed to {n + sz.batch:,} (herd + "
        f"probe) in every answer, and the `{QUEUE}` queue's waiting + running + finished "
        f"to {n:,}: {tr['counts_ok']}; "
        f"`oldest_due_age` was present in each ({tr['missing_age']} missing), never "
        f"decreased ({tr['age_monotonic']}), and differed from the true age of the "
        f"backlog (time since the due instant, at the middle of the call) by at most "
        f"{tr['age_diff_max_ms']:.0f} ms, of which at most {tr['age_err_max_ms']:.0f} ms "
        f"is not explained by the call's own duration; it reached "
        f"{C.fmt(tr['max_age'], 1)} s; `due` started at {C.fmt(tr['first_due'])} and only "
        f"went down ({tr['due_monotonic']})."
    )

"""The workloads of ``bench_core`` as its report walks them, and the parts of the report
that list them one by one: workload 4's (the store's) own table, the other processes' CPU
and the per-run values behind the medians of the results table."""

from __future__ import annotations

from typing import cast

from _common import Failed, done, fmt
from core_harness import (
    NOISE,
    Sizes,
)
from core_results import Lag, Results, Run, Store, System, Throughput

Workload = Throughput | Lag | Failed


def rate_of(res: Throughput | Failed | None) -> float | None:
    """The jobs/s of a throughput workload that ran, else None."""
    got = done(res)
    return None if got is None else got["rate"]


def workloads(R: Results) -> list[tuple[str, str, Workload]]:
    """(system, workload, result) of every workload of jobctl and the peers that ran."""
    systems: list[tuple[str, System]] = [
        ("jobctl", R.get("jobctl", {})),
        ("huey", R.get("huey", {})),
        ("aps", R.get("aps", {})),
    ]
    # TypedDict.items() loses the value types; each value of a System is a Workload.
    return [(who, k, cast(Workload, v)) for who, s in systems for k, v in s.items()]


def _store_section(w: Store, sz: Sizes) -> list[str]:
    """Workload 4's own table: claim times per backlog shape."""
    n_small, n_big = sz.store_small, sz.store_big
    o = w["overdue"]
    return [
        "### Store backlogs (workload 4, in-process `SqliteStore`)",
        "",
        f"Jobs were inserted through `SqliteStore.insert` in batches of 10,000 "
        f"({w['fill_rate']:,.0f} jobs/s on this machine; "
        f"{w['db_mb_per_million']:,.0f} MB of database per million jobs). "
        f'"none due" times `claim_due(limit=16)` when nothing is due (no write, no fsync); '
        f'"16 due" first inserts 16 due jobs (untimed), then times the claim that takes '
        f"them (one fsync'd group commit).",
        "",
        "| shape | claim_due(16) none due (ms) | claim_due(16) 16 due (ms) | notes |",
        "|---|---:|---:|---|",
        f"| {n_small:,} future | {w['small']['none_ms']:.3f} | {w['small']['few_ms']:.3f} | |",
        f"| {n_big:,} future | {w['big']['none_ms']:.3f} | {w['big']['few_ms']:.3f} | "
        f"daemon `GET /v1/status` {w['rss_big']['status_ms']:.1f} ms |",
        f"| {w['huge_n']:,} future (target {sz.store_huge:,}) | {w['huge']['none_ms']:.3f} | "
        f"{w['huge']['few_ms']:.3f} | "
        + (
            ""
            if w["huge_n"] >= sz.store_huge
            else f"{sz.store_huge:,} did not fit the {sz.huge_budget:.0f} s insert budget: "
            f"inserting runs at {w['huge_rate']:,.0f} jobs/s, so {sz.store_huge:,} would "
            f"take ~{sz.store_huge / w['huge_rate'] / 60:.0f} min"
        )
        + " |",
        f"| {n_big:,} overdue, still in the future bucket (clock moved past all run_at) | "
        f"– | {o['promote_p50_ms']:.1f} (max {o['promote_max_ms']:.0f}) | each claim "
        f"first promotes {o.get('promote_batch', 5000):,} jobs: {o['promote_calls']} "
        f"claims, {o['drain_s']:.1f} s to "
        f"promote all; `stats()` (status) {o['status_ms']:.0f} ms before promotion |",
        f"| {n_big:,} overdue, all due, priorities −5..5 | – | {o['steady_ms']:.3f} | "
        f"after promotion; claims the 16 highest-priority jobs |",
        "",
    ]


def _others(R: Results) -> list[float]:
    """The other-process CPU of every kept run."""
    out: list[float] = []
    for _, _, res in workloads(R):
        if "error" not in res:
            out += [r["other_cores"] for r in res["runs"] if "other_cores" in r]
    store = done(R.get("w4", {}).get("store"))
    if store is not None:
        for shape in (store["small"], store["big"], store["huge"]):
            out += shape["other_cores"]
    return out


_DETAIL_KEYS = {
    "single": ("rate", "daemon_cores", "req_p50_ms", "req_p99_ms", "other_cores", "verified"),
    "batch": ("rate", "daemon_cores", "req_p50_ms", "req_p99_ms", "other_cores", "verified"),
    "client": (
        "rate",
        "client_cpu_us",
        "daemon_cores",
        "req_p50_ms",
        "req_p99_ms",
        "other_cores",
        "verified",
    ),
    "enqueue": ("rate", "req_p50_ms", "req_p99_ms", "errors", "stored", "other_cores", "verified"),
    "e2e": (
        "rate",
        "wall",
        "daemon_cores",
        "enqueue_s",
        "add_seconds",
        "due_to_last",
        "late_enqueue",
        "locked_retries",
        "other_cores",
        "verified",
    ),
    "lag": (
        "p50",
        "p99",
        "max",
        "exec_p50",
        "exec_p99",
        "late_enqueue",
        "locked_retries",
        "other_cores",
        "verified",
    ),
}


def _details(R: Results) -> list[str]:
    """One line per workload: each run's key numbers (medians are in the tables)."""
    names = {"jobctl": "jobctl", "huey": "huey", "aps": "APScheduler"}
    out = [
        f"* {names[who]} {wl}: " + _run_values(wl, res["runs"])
        for who, wl, res in workloads(R)
        if "error" not in res
    ]
    w = done(R.get("w4", {}).get("store"))
    if w is not None:
        for name, shape in (("small", w["small"]), ("big", w["big"]), ("huge", w["huge"])):
            out.append(
                f"* store {name}: claim none due per run (ms) "
                + "/".join(f"{x:.3f}" for x in shape["none_runs_ms"])
                + "; 16 due per run (ms) "
                + "/".join(f"{x:.3f}" for x in shape["few_runs_ms"])
            )
        out.append(
            "* store overdue steady claims per run (ms) "
            + "/".join(f"{x:.3f}" for x in w["overdue"]["steady_runs_ms"])
        )
    out.append(
        "* CPU used by other processes just before each run, while waiting for quiet "
        "(cores): " + " ".join(f"{x:.2f}" for x in NOISE.background)
    )
    return out


def _run_values(workload: str, runs: list[Run]) -> str:
    """``key v1/v2/v3`` for each of the workload's detail keys that its runs recorded."""
    parts = []
    for k in _DETAIL_KEYS.get(workload, ()):
        vals = [r.get(k) for r in runs if k in r]
        if vals:
            parts.append(f"{k} " + "/".join(_run_value(v) for v in vals))
    return "; ".join(parts)


def _run_value(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return fmt(v, 1 if v < 100 else 0)

"""Workload r of ``bench_schedules``: the reads of a daemon holding N schedules and N due
jobs (issue 18), through the API (medians) and as CLI commands, and a walk of every
schedule page with the daemon's RSS around it. The same on either backend."""

from __future__ import annotations

import random
import subprocess
import time
from typing import Any

import _common as C
from _common import JOBCTL_BIN, Daemon, clean_env, log, wait_quiet
from schedules_report import Reads


def _timed(fn: Any, times: int) -> list[float]:
    out = []
    for _ in range(times):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _cli_ms(d: Daemon, *argv: str, runs: int = 5) -> float:
    """Median wall time of ``jobctl ARGV --socket S`` (interpreter start-up included)."""
    cmd = [JOBCTL_BIN, *argv, "--socket", str(d.sock)]
    env = clean_env(d.dir)
    return C.median(
        _timed(lambda: subprocess.run(cmd, capture_output=True, check=True, env=env), runs)
    )


def wr_reads(d: Daemon, c: Any, n: int) -> Reads:
    """Workload r: the reads of a daemon holding ``n`` schedules and ``n`` due jobs."""
    wait_quiet("reads")
    first = c.page("/v1/schedules", {"limit": 50})
    some = [s["id"] for s in first["items"]]
    status = _timed(c.status, 30)
    list50 = _timed(lambda: c.page("/v1/schedules", {"limit": 50}), 30)
    show = _timed(lambda: c.schedule(random.choice(some)), 30)
    cli = (
        _cli_ms(d, "status"),
        _cli_ms(d, "schedules", "list", "--limit", "50"),
        _cli_ms(d, "schedules", "show", some[0]),
    )
    rss_before = d.rss()["rss_mb"]
    t = time.perf_counter()
    walked = pages = 0
    peak = 0.0
    for got in c.pages("/v1/schedules", {"limit": 1000}):
        walked += len(got["items"])
        pages += 1
        if pages % 50 == 0:
            peak = max(peak, d.rss()["rss_mb"])
    walk_s = time.perf_counter() - t
    after = d.rss()
    out: Reads = {
        "status_ms": C.median(status),
        "status_max_ms": max(status),
        "list50_ms": C.median(list50),
        "list50_max_ms": max(list50),
        "show_ms": C.median(show),
        "show_max_ms": max(show),
        "cli_status_ms": cli[0],
        "cli_list50_ms": cli[1],
        "cli_show_ms": cli[2],
        "rss_before_walk_mb": rss_before,
        "walk_s": walk_s,
        "walked": walked,
        "pages": pages,
        "rss_walk_max_mb": max(peak, after["rss_mb"]),
        "rss_after_walk_mb": after["rss_mb"],
        "hwm_mb": after["hwm_mb"],
        "verified": walked == n,
    }
    log(
        f"r: status {out['status_ms']:.1f} ms, list --limit 50 {out['list50_ms']:.1f} ms, "
        f"show {out['show_ms']:.1f} ms (API medians); CLI {cli[0]:.0f} / {cli[1]:.0f} / "
        f"{cli[2]:.0f} ms; walk of {walked:,} in {pages} pages {walk_s:.1f} s, RSS "
        f"{rss_before:.0f} → {after['rss_mb']:.0f} MB (peak {after['hwm_mb']:.0f})"
    )
    return out

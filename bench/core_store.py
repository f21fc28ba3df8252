"""Workload 4 of ``bench_core``: the store in-process with 10k to millions of waiting jobs
(claim time, daemon RSS, overdue promotion).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import _common as C
from _common import UTC, log
from core_harness import Daemon, Sizes, guarded_runs
from core_results import ClaimTimes, DaemonRss, Overdue, Store, Timed


class ShiftedClock:
    """The system clock moved by ``offset`` seconds (the store only calls ``now``)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(time.time() + self.offset, UTC)

    async def sleep_until(self, deadline: Any, wake: Any) -> None:  # pragma: no cover
        raise NotImplementedError


class StoreBench:
    def __init__(self, sz: Sizes) -> None:
        from jobctl.domain.models import AttemptResult, JobSpec
        from jobctl.domain.states import Outcome

        self.sz = sz
        self.JobSpec = JobSpec
        self.ok = AttemptResult(Outcome.SUCCEEDED, 0)
        self.rng = random.Random(7)
        self.uid = os.geteuid()
        self.base = dt.datetime.now(UTC) + dt.timedelta(days=30)

    def open(self, path: Path, offset: float = 0.0) -> Any:
        from jobctl.domain.clock import SystemClock
        from jobctl.store.sqlite import SqliteStore

        return SqliteStore(path, ShiftedClock(offset) if offset else SystemClock())

    def fill(self, store: Any, n: int, budget: float | None = None) -> tuple[int, float]:
        """Insert ``n`` future jobs (run_at 30–31 days ahead, priorities −5..5) through
        ``store.insert`` in batches of 10,000; stop early when ``budget`` seconds pass."""
        t0 = time.monotonic()
        done = 0
        while done < n and (budget is None or time.monotonic() - t0 < budget):
            k = min(10_000, n - done)
            store.insert(
                [
                    self.JobSpec(
                        command=("true",),
                        owner_uid=self.uid,
                        priority=self.rng.randint(-5, 5),
                        run_at=self.base
                        + dt.timedelta(milliseconds=self.rng.randrange(86_400_000)),
                    )
                    for _ in range(k)
                ]
            )
            done += k
            if done % 100_000 == 0:
                log(f"  store fill: {done} jobs, {done / (time.monotonic() - t0):.0f} jobs/s")
        return done, time.monotonic() - t0

    def claim_none(self, store: Any) -> list[float]:
        times = []
        for _ in range(self.sz.claim_calls):
            t = time.perf_counter()
            claims = store.claim_due("bench", 16, 30.0)
            times.append(time.perf_counter() - t)
            assert not claims
        return times

    def claim_few(self, store: Any) -> list[float]:
        times = []
        for _ in range(self.sz.claim_rounds):
            now = dt.datetime.now(UTC)
            store.insert(
                [self.JobSpec(command=("true",), run_at=now, owner_uid=self.uid) for _ in range(16)]
            )
            t = time.perf_counter()
            claims = store.claim_due("bench", 16, 30.0)
            times.append(time.perf_counter() - t)
            assert len(claims) == 16, len(claims)
            for c in claims:
                store.finish(c.job.id, c.generation, self.ok)
        return times

    def claim_times(self, store: Any, name: str) -> ClaimTimes:
        """Median over runs of the per-run median claim time, none due and 16 due."""
        none: list[Timed] = []
        for _ in guarded_runs(self.sz.runs, none, f"claim none due, {name}"):
            none.append({"t": C.median(self.claim_none(store))})
        few: list[Timed] = []
        for _ in guarded_runs(self.sz.runs, few, f"claim 16 due, {name}"):
            few.append({"t": C.median(self.claim_few(store))})
        return {
            "none_ms": C.median([x["t"] for x in none]) * 1000,
            "few_ms": C.median([x["t"] for x in few]) * 1000,
            "none_runs_ms": [x["t"] * 1000 for x in none],
            "few_runs_ms": [x["t"] * 1000 for x in few],
            "other_cores": [x["other_cores"] for x in none + few],
        }


def daemon_rss(workdir: Path, db: Path | None, sz: Sizes) -> DaemonRss:
    """RSS after 5 status calls, 100 due jobs claimed and run, 5 lists, 5 status calls."""
    d = Daemon(workdir, sz.concurrency, db=db)
    try:
        http = d.http()
        status_ms = []
        for _ in range(5):
            t = time.perf_counter()
            before = http.json("GET", "/v1/status")["counts"]
            status_ms.append((time.perf_counter() - t) * 1000)
        http.json("POST", "/v1/jobs", [{"command": ["true"]}] * 100)
        deadline = time.time() + 60
        while http.json("GET", "/v1/status")["counts"]["succeeded"] < before["succeeded"] + 100:
            if time.time() > deadline:
                raise RuntimeError("the 100 due jobs did not finish in 60 s")
            time.sleep(0.1)
        for _ in range(5):
            http.json("GET", "/v1/jobs?limit=100")
        for _ in range(5):
            t = time.perf_counter()
            http.json("GET", "/v1/status")
            status_ms.append((time.perf_counter() - t) * 1000)
        http.close()
        time.sleep(1.0)
        return {
            "rss_mb": C.proc_status_kb(d.pid, "VmRSS") / 1024,
            "hwm_mb": C.proc_status_kb(d.pid, "VmHWM") / 1024,
            "status_ms": C.median(status_ms),
        }
    finally:
        d.stop()


def overdue(sb: StoreBench, big_path: Path, sz: Sizes) -> Overdue:
    """The big backlog all overdue: the same jobs with the clock moved past all their run_at
    (a daemon that was down, or one huge burst); claims first promote them PROMOTE_BATCH at
    a time, then claim the highest-priority due jobs."""
    from jobctl.store.queues import PROMOTE_BATCH

    store = sb.open(big_path, offset=32 * 86400)
    t = time.perf_counter()
    store.stats()
    stats_ms = (time.perf_counter() - t) * 1000
    promote, t0 = [], time.perf_counter()
    while True:
        t = time.perf_counter()
        store.claim_due("bench", 16, 30.0)
        promote.append(time.perf_counter() - t)
        if len(promote) % 10 == 0 and store.wakeups("bench").next_run_at is None:
            break
    drain_s = time.perf_counter() - t0
    steady = []
    for _ in range(sz.runs):
        times = []
        for _ in range(sz.claim_calls // 2):
            t = time.perf_counter()
            got = store.claim_due("bench", 16, 30.0)
            times.append(time.perf_counter() - t)
            assert len(got) == 16
        steady.append(C.median(times))
    store.close()
    return {
        "status_ms": stats_ms,
        "promote_calls": len(promote),
        "promote_batch": PROMOTE_BATCH,
        "promote_p50_ms": C.pct(promote, 50) * 1000,
        "promote_max_ms": max(promote) * 1000,
        "drain_s": drain_s,
        "steady_ms": C.median(steady) * 1000,
        "steady_runs_ms": [x * 1000 for x in steady],
    }


def w4(tmp: Path, sz: Sizes) -> Store:
    sb = StoreBench(sz)
    wd = tmp / "w4"
    wd.mkdir()
    # 10k waiting
    small_store = sb.open(wd / "small.db")
    sb.fill(small_store, sz.store_small)
    small = sb.claim_times(small_store, f"{sz.store_small:,} waiting")
    small_store.close()
    log(f"claim with {sz.store_small} waiting: {small}")
    # 1M waiting
    big_path = wd / "big.db"
    big_store = sb.open(big_path)
    n, secs = sb.fill(big_store, sz.store_big)
    big = sb.claim_times(big_store, f"{sz.store_big:,} waiting")
    big_store.close()
    log(f"claim with {sz.store_big} waiting: {big} (filled at {n / secs:.0f} jobs/s)")
    rss_empty = daemon_rss(wd / "d-empty", None, sz)
    rss_big = daemon_rss(wd / "d-big", big_path, sz)
    log(f"daemon RSS empty {rss_empty}, with {sz.store_big} waiting {rss_big}")
    huge_path = wd / "huge.db"
    shutil.copyfile(big_path, huge_path)
    late = overdue(sb, big_path, sz)
    log(f"1 overdue backlog: {late}")
    big_path.unlink()
    # towards 5M waiting, within the time budget
    huge_store = sb.open(huge_path)
    added, huge_secs = sb.fill(huge_store, sz.store_huge - sz.store_big, budget=sz.huge_budget)
    huge_n = sz.store_big + added
    huge = sb.claim_times(huge_store, "bigger store")
    huge_store.close()
    log(f"claim with {huge_n} waiting: {huge}")
    return {
        "small": small,
        "fill_rate": n / secs,
        "big": big,
        "rss_empty": rss_empty,
        "rss_big": rss_big,
        "overdue": late,
        "huge_n": huge_n,
        "huge_rate": added / huge_secs if huge_secs else float("nan"),
        "huge": huge,
        "db_mb_per_million": huge_path.stat().st_size / 1e6 / (huge_n / 1e6),
    }

"""What every workload of ``bench_core`` shares: sizes and targets, the daemon under test
(a snapshot of a revision or the working tree), CPU sampling, and the noise guard that
redoes a run other processes disturbed.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import _common as C
from _common import ROOT, UTC, background_cores, log, spawn, stop_proc
from core_results import Run, Throughput, Timed

PY = sys.executable
#: The daemon is started through the interpreter so that PYTHONPATH decides which jobctl
#: runs: by default a snapshot of a committed revision (see ``use_snapshot``).
JOBCTL = [PY, "-c", "from jobctl.cli.main import entry; entry()"]
MARK_START, MARK_END = "<!-- bench_core:start -->", "<!-- bench_core:end -->"
FAR = "2099-01-01T00:00:00Z"
# Kept run directories: workloads that run commands keep each run's directory (its
# attempt logs) until the bench ends. Deleting 20,000 logs right before the next run made
# ext4 check every recently deleted inode on each new file for about 30 s (perf:
# find_inode_bit -> recently_deleted): up to ~1 ms of kernel time per log file, and each
# e2e run slower than the one before (748, 629, 490 jobs/s). That cost was the bench's
# own cleanup, not jobctl's.


@dataclass(frozen=True)
class Sizes:
    runs: int
    enqueue_seconds: float
    batch: int
    e2e_jobs: int
    lag_jobs: int
    lag_spread: float
    store_small: int
    store_big: int
    store_huge: int
    huge_budget: float  # seconds allowed for growing the big store towards store_huge
    claim_calls: int
    claim_rounds: int
    aps_e2e_jobs: int  # APScheduler adds jobs one commit at a time: see the report note
    clients: int = 8
    concurrency: int = 32


FULL = Sizes(
    runs=3,
    enqueue_seconds=4.0,
    batch=500,
    e2e_jobs=20_000,
    lag_jobs=2_000,
    lag_spread=10.0,
    store_small=10_000,
    store_big=1_000_000,
    store_huge=5_000_000,
    huge_budget=45.0,
    claim_calls=200,
    claim_rounds=30,
    aps_e2e_jobs=5_000,
)
QUICK = Sizes(
    runs=1,
    enqueue_seconds=2.0,
    batch=500,
    e2e_jobs=2_000,
    lag_jobs=500,
    lag_spread=5.0,
    store_small=10_000,
    store_big=100_000,
    store_huge=200_000,
    huge_budget=20.0,
    claim_calls=100,
    claim_rounds=20,
    aps_e2e_jobs=1_000,
)

TARGETS = {
    "single": 5_000.0,
    "batch": 30_000.0,
    "e2e": 500.0,
    "lag_p99_ms": 50.0,
    "claim_ratio": 2.0,
    "rss_mb": 150.0,
}


class Daemon:
    """A real ``jobctl daemon`` on temp paths; waits for ``event=ready`` on stderr."""

    def __init__(self, workdir: Path, concurrency: int = 32, db: Path | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.dir = workdir
        self.db = db or workdir / "jobctl.db"
        self.sock = workdir / "jobctl.sock"
        self.log_path = workdir / "daemon.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = spawn(
            [
                *JOBCTL,
                "daemon",
                "--db",
                str(self.db),
                "--socket",
                str(self.sock),
                "--concurrency",
                str(concurrency),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.pid = self.proc.pid
        C.wait_ready(self.proc, self.log_path, self.stop)

    def http(self) -> C.UdsHttp:
        return C.UdsHttp(str(self.sock))

    def stop(self) -> None:
        stop_proc(self.proc)
        self._log.close()


class CpuSampler:
    """Samples a process's CPU time in the background, to get its use over a window."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), C.cpu_seconds(self.pid)))
            except OSError:
                return
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cores(self, t0: float, t1: float) -> float:
        """Average cores used over [t0, t1] (nearest samples)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return float("nan")
        (a, ca), (b, cb) = inside[0], inside[-1]
        return (cb - ca) / (b - a) if b > a else float("nan")


def use_snapshot(rev: str, tmp: Path) -> str:
    """Run jobctl from ``git archive REV src`` (read-only for the repository).

    Other engineers edit src/ while benchmarks run; a committed snapshot keeps one run
    consistent and names exactly what was measured. Returns a description for the report.
    """
    extracted, full = C.extract_src(rev, tmp)
    src = str(extracted)
    os.environ["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path.insert(0, src)
    return f"commit {full} (committed src/ extracted with git archive)"


def use_worktree() -> str:
    src = str(ROOT / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path.insert(0, src)
    return C.git_state() or "working tree (git unavailable)"


#: Before each run, wait until other processes use at most QUIET_CORES (sampled for 1 s),
#: within a total waiting budget for the whole bench (``--quiet-wait``).
QUIET_CORES = 0.3
#: A run during which other processes used more than MAX_OTHER cores on average is
#: redone (at most MAX_RETRIES times per run, within RETRY_BUDGET_TOTAL seconds in all).
MAX_OTHER = 0.3
MAX_RETRIES = 2
RETRY_BUDGET_TOTAL = 360.0


@dataclass
class Noise:
    """What other processes did to one bench run: the background load sampled before each
    run, the runs redone because they were disturbed, and the budgets left for waiting and
    redoing. One per bench invocation (:data:`NOISE`); the report states it."""

    quiet_budget: float = 120.0
    retry_budget: float = RETRY_BUDGET_TOTAL
    background: list[float] = field(default_factory=list)
    redone: list[str] = field(default_factory=list)

    def note_background(self) -> float:
        """Wait (within the budget) for a quiet moment; record the load then."""
        while True:
            t = time.monotonic()
            bg = background_cores(1.0)
            if bg <= QUIET_CORES or self.quiet_budget <= 0:
                break
            time.sleep(2.0)
            self.quiet_budget -= time.monotonic() - t
        self.background.append(bg)
        return bg


#: The noise record of this bench invocation (set up by ``bench_core.main``).
NOISE = Noise()


class Guard:
    """Measures the CPU other processes used during a run: all CPUs' busy time minus this
    bench's own process tree (itself plus every child it has reaped: daemons with their
    commands, client processes, huey consumers, the APScheduler process)."""

    def __enter__(self) -> Guard:
        self.b0, self.c0, self.t0 = _busy_seconds(), _own_cpu(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.t0
        other = (_busy_seconds() - self.b0) - (_own_cpu() - self.c0)
        self.other = max(0.0, other / max(self.elapsed, 1e-6))


def _busy_seconds() -> float:
    return C._cpu_busy()[0] / C._CLK_TCK


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def guarded_runs(n: int, runs: list[Run] | list[Timed], name: str) -> Iterator[int]:
    """Yield run numbers 0..n-1; a run whose result (appended to ``runs`` by the caller)
    was disturbed by other processes is dropped and run again, budget permitting."""
    r = tries = 0
    while r < n:
        NOISE.note_background()
        before = len(runs)
        with Guard() as g:
            yield r
        if len(runs) > before:
            runs[-1]["other_cores"] = g.other
            if g.other > MAX_OTHER and tries < MAX_RETRIES and NOISE.retry_budget > 0:
                runs.pop()
                NOISE.retry_budget -= g.elapsed
                NOISE.redone.append(
                    f"{name} run {r + 1} (other processes used {g.other:.2f} cores)"
                )
                log(f"  {name} run {r + 1}: other processes used {g.other:.2f} cores; redoing it")
                tries += 1
                continue
        r += 1
        tries = 0


# -- time helpers -------------------------------------------------------------------


def iso_ms(epoch: float) -> str:
    ms = round(epoch * 1000)
    t = dt.datetime.fromtimestamp(ms // 1000, UTC) + dt.timedelta(milliseconds=ms % 1000)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_iso(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- workload 1: enqueue throughput -------------------------------------------------


def _summarise_clients(res: list[dict[str, Any]]) -> Run:
    """One run of workload 1 from what its client processes reported."""
    jobs = sum(r["jobs"] for r in res)
    t0, t1 = min(r["t0"] for r in res), max(r["last"] for r in res)
    lat = [x for r in res for x in r["lat"]]
    return {
        "jobs": jobs,
        "wall": t1 - t0,
        "rate": jobs / (t1 - t0),
        "t0": t0,
        "t1": t1,
        "errors": sum(r["errors"] for r in res),
        "warm_jobs": sum(r["warm_jobs"] for r in res),
        "req_p50_ms": C.pct(lat, 50) * 1000,
        "req_p99_ms": C.pct(lat, 99) * 1000,
    }


#: The extras of a throughput workload that are reported as the median of its runs.
Extra = Literal["daemon_cores", "req_p50_ms", "req_p99_ms", "client_cpu_us", "enqueue_s",
                "add_seconds"]  # fmt: skip


def _agg(runs: list[Run], extra: tuple[Extra, ...] = ()) -> Throughput:
    """The median jobs/s of the kept runs, the medians of ``extra``, and the runs."""
    out: Throughput = {
        "rate": C.median([r["rate"] for r in runs]),
        "runs": runs,
        "verified": all(r.get("verified", True) for r in runs),
    }
    for k in extra:
        out[k] = C.median([r[k] for r in runs])
    return out

#!/usr/bin/env python
"""Core benchmarks of jobctl against its targets and against huey and APScheduler 3.x.

Run ``python bench/bench_core.py`` (full: 3 runs each, medians; about 25 min on 2 idle cores) or
``--quick`` (1 run, small sizes). Every jobctl workload starts a real ``jobctl daemon``
subprocess on fresh temp paths and talks to it over its Unix socket. Workloads:

1. durable enqueue throughput, 8 concurrent client processes: (a) one job per request,
   (b) 500 jobs per request (batch form), (c) one job per call through the shipped Python
   client (``jobctl.client``). Jobs are due in 2099 so nothing runs.
2. end-to-end: N jobs running ``true``, all due at one instant (enqueued in batches just
   before), ``--concurrency 32``; jobs/s from the first attempt start to the last finish.
3. dispatch lag: jobs due at spread times over a few seconds; attempt start − run_at.
4. the store in-process: claim time with 10k vs 1M waiting jobs, daemon RSS with 1M jobs,
   1M overdue jobs, and as many future jobs towards 5M as the time budget allows.
5. workloads 1–3 against huey (SqliteHuey + consumer process) and APScheduler 3
   (BackgroundScheduler + SQLAlchemyJobStore on SQLite), with ratios.

Results are printed and written to docs/benchmarks.md between the bench_core markers.
The workloads live in ``core_*.py`` beside this file, one module each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
from _common import log  # noqa: E402
from core_e2e import w2_aps, w2_huey, w2_jobctl  # noqa: E402
from core_enqueue import w1_aps, w1_huey, w1_jobctl  # noqa: E402
from core_harness import (  # noqa: E402
    FULL,
    NOISE,
    QUICK,
    Sizes,
    use_snapshot,
    use_worktree,
)
from core_lag import w3_aps, w3_huey, w3_jobctl  # noqa: E402
from core_report import _get, machine, report, write_doc  # noqa: E402
from core_store import w4  # noqa: E402

#: Raw results: per system ("jobctl", "huey", "aps", "w4"), per workload, what it returned.
Results = dict[str, dict[str, Any]]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 run, small sizes (development)")
    ap.add_argument("--only", default="1,2,3,4", help="workloads to run, e.g. 1,2")
    ap.add_argument("--no-peers", action="store_true", help="skip huey and APScheduler")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument("--tmpdir", default=None, help="where temp dirs go (default: system temp)")
    ap.add_argument(
        "--rev", default="HEAD", help="benchmark this committed revision of src/ (default: HEAD)"
    )
    ap.add_argument(
        "--worktree",
        action="store_true",
        help="benchmark the working tree's src/ as it is instead of --rev",
    )
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="total time to wait for other processes to go quiet before runs",
    )
    ap.add_argument(
        "--from-json",
        metavar="FILE",
        help="no benchmark: render the report of a saved bench/results/*.json",
    )
    return ap.parse_args()


def from_json(path: str, write: bool) -> int:
    """Render (and write) the report of a saved run, without benchmarking."""
    saved = json.loads(Path(path).read_text())
    NOISE.background[:] = saved["background"]
    NOISE.redone[:] = saved.get("redone", [])
    sizes = Sizes(**saved["sizes"])
    section, _ = report(saved["results"], sizes, saved["command"], saved["machine"],
                        saved["elapsed"])  # fmt: skip
    print(section)
    if write:
        write_doc(section)
        log(f"wrote {C.DOC}")
    return 0


def run_workloads(R: Results, tmp: Path, sz: Sizes, only: set[str], peers: bool) -> None:
    """Run the chosen workloads into ``R``; one failing workload does not lose the others."""

    def run(who: str, key: str, fn: Any, *a: Any) -> None:
        try:
            R[who][key] = fn(*a)
        except Exception as exc:
            log(f"{who} {key} FAILED: {exc!r}")
            R[who][key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}

    def rate(who: str, key: str) -> Any:
        return _get(R[who], key, "rate")

    if "1" in only:
        for mode in ("single", "batch", "client"):
            run("jobctl", mode, w1_jobctl, tmp, sz, mode)
        if peers:
            run("huey", "enqueue", w1_huey, tmp, sz)
            run("aps", "enqueue", w1_aps, tmp, sz)
    if "2" in only:
        run("jobctl", "e2e", w2_jobctl, tmp, sz, rate("jobctl", "batch"))
        if peers:
            run("huey", "e2e", w2_huey, tmp, sz, rate("huey", "enqueue"))
            run("aps", "e2e", w2_aps, tmp, sz, rate("aps", "enqueue"))
    if "3" in only:
        run("jobctl", "lag", w3_jobctl, tmp, sz)
        if peers:
            run("huey", "lag", w3_huey, tmp, sz)
            run("aps", "lag", w3_aps, tmp, sz, rate("aps", "enqueue"))
    if "4" in only:
        R["w4"] = {}
        run("w4", "store", w4, tmp, sz)


def save(R: Results, sz: Sizes, cmd: str, info: dict[str, str], elapsed: float) -> None:
    """Keep the raw results (bench/results/, git-ignored) for ``--from-json``."""
    raw = {"results": R, "sizes": sz.__dict__, "command": cmd, "machine": info,
           "elapsed": elapsed, "background": NOISE.background, "redone": NOISE.redone}  # fmt: skip
    log(f"raw results in {C.save_json('bench_core', raw)}")


def summarise(R: Results, checks: list[tuple[str, bool]]) -> None:
    print("\nTargets:")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'MISS'}  {name}")
    unverified = [f"{who}.{k}" for who, d in R.items() if who != "w4" for k, v in d.items()
                  if not v.get("verified", True)]  # fmt: skip
    if unverified:
        print("  WARNING: verification failed for " + ", ".join(unverified))


def main() -> int:
    args = parse_args()
    sz = QUICK if args.quick else FULL
    NOISE.quiet_budget = args.quiet_wait
    if args.from_json:
        return from_json(args.from_json, not args.no_write)
    signal.signal(signal.SIGTERM, C.on_signal)
    signal.signal(signal.SIGINT, C.on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-", dir=args.tmpdir))
    started = time.time()
    info: dict[str, str] = {}
    R: Results = {"jobctl": {}, "huey": {}, "aps": {}}
    try:
        source = use_worktree() if args.worktree else use_snapshot(args.rev, tmp)
        info = machine(source)
        log(f"bench_core {'quick' if args.quick else 'full'} in {tmp}: {info}")
        run_workloads(R, tmp, sz, set(args.only.split(",")), not args.no_peers)
    finally:
        C.kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
        elapsed = time.time() - started
        cmd = "python bench/bench_core.py" + "".join(f" {a}" for a in sys.argv[1:])
        save(R, sz, cmd, info, elapsed)
    section, checks = report(R, sz, cmd, info, elapsed)
    print(section)
    summarise(R, checks)
    if not args.no_write:
        write_doc(section)
        log(f"wrote {C.DOC}")
    log(f"done in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

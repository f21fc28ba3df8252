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

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
from _common import log  # noqa: E402
from core_details import rate_of, workloads  # noqa: E402
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
from core_report import machine, report, write_doc  # noqa: E402
from core_results import Results  # noqa: E402
from core_store import w4  # noqa: E402


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
    j, h, a = R["jobctl"], R["huey"], R["aps"]
    if "1" in only:
        j["single"] = C.attempt("jobctl single", w1_jobctl, tmp, sz, "single")
        j["batch"] = C.attempt("jobctl batch", w1_jobctl, tmp, sz, "batch")
        j["client"] = C.attempt("jobctl client", w1_jobctl, tmp, sz, "client")
        if peers:
            h["enqueue"] = C.attempt("huey enqueue", w1_huey, tmp, sz)
            a["enqueue"] = C.attempt("aps enqueue", w1_aps, tmp, sz)
    if "2" in only:
        j["e2e"] = C.attempt("jobctl e2e", w2_jobctl, tmp, sz, rate_of(j.get("batch")))
        if peers:
            h["e2e"] = C.attempt("huey e2e", w2_huey, tmp, sz, rate_of(h.get("enqueue")))
            a["e2e"] = C.attempt("aps e2e", w2_aps, tmp, sz, rate_of(a.get("enqueue")))
    if "3" in only:
        j["lag"] = C.attempt("jobctl lag", w3_jobctl, tmp, sz)
        if peers:
            h["lag"] = C.attempt("huey lag", w3_huey, tmp, sz)
            a["lag"] = C.attempt("aps lag", w3_aps, tmp, sz, rate_of(a.get("enqueue")))
    if "4" in only:
        R["w4"] = {"store": C.attempt("w4 store", w4, tmp, sz)}


def save(R: Results, sz: Sizes, cmd: str, info: dict[str, str], elapsed: float) -> None:
    """Keep the raw results (bench/results/, git-ignored) for ``--from-json``."""
    raw = {"results": R, "sizes": sz.__dict__, "command": cmd, "machine": info,
           "elapsed": elapsed, "background": NOISE.background, "redone": NOISE.redone}  # fmt: skip
    log(f"raw results in {C.save_json('bench_core', raw)}")


def summarise(R: Results, checks: list[tuple[str, bool]]) -> None:
    print("\nTargets:")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'MISS'}  {name}")
    unverified = [f"{who}.{k}" for who, k, v in workloads(R) if not v.get("verified", True)]
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

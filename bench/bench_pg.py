#!/usr/bin/env python
"""The PostgreSQL backend's benchmark (issue 15): what several daemons on one database
sustain, beside SQLite and procrastinate measured in the same run.

Run ``python bench/bench_pg.py`` (about 5 minutes on 2 cores) or ``--quick`` (about 2);
it measures the jobctl installed in the running venv (``pip install -e '.[bench]'`` of
this working tree) against the server at ``JOBCTL_BENCH_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), in databases named ``pgbench_…`` it
makes and drops. Workloads (``pg_work.py``):

1. enqueue through the API, 8 clients, 1 and 500 jobs per request, on a SQLite daemon and
   on a PostgreSQL daemon;
2. the scheduler's ceiling: 1, 2 and 4 in-process daemons (instant executor) on one
   database: jobs/s, and PostgreSQL and daemon CPU seconds per 1,000 jobs;
3. end-to-end: 2 real daemons run N ``true`` jobs due at one instant;
4. cross-daemon dispatch lag: jobs enqueued on daemon A (its one slot busy) run by B;
5. procrastinate: enqueue (8 clients) and one worker's drain.

Double runs and double fires are counted in every run. Results are printed with each
target met or missed, and written to docs/benchmarks.md between the bench_pg markers.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
import pg_work as W  # noqa: E402
from _common import Failed  # noqa: E402
from pg_harness import uptime  # noqa: E402
from pg_report import FULL, MARKS, QUICK, Ceiling, Results, Sizes, report  # noqa: E402


def run(R: Results, tmp: Path, sz: Sizes, only: set[str]) -> None:
    """Each chosen workload into ``R``; one that fails does not lose the others."""
    if "1" in only:
        R["enqueue"] = {
            f"{backend}_{mode}": C.attempt(
                f"enqueue {backend} {mode}", W.enqueue, tmp, sz, backend, mode
            )
            for mode in ("single", "batch", "client")
            for backend in ("sqlite", "pg")
        }
    if "2" in only:
        R["ceiling"] = ceilings(tmp, sz)
    if "3" in only:
        R["e2e"] = C.attempt("e2e", W.e2e, tmp, sz)
    if "4" in only:
        R["lag"] = C.attempt("lag", W.lag, tmp, sz)
    if "5" in only:
        R["procrastinate"] = C.attempt("procrastinate", W.procrastinate, tmp, sz)


def ceilings(tmp: Path, sz: Sizes) -> list[Ceiling | Failed]:
    """Each set-up (SQLite, then 1, 2, 4 daemons on PostgreSQL) ``sz.runs`` times,
    interleaved so that the machine's load drifts over all alike; per set-up the run of
    median rate, with every run's rate beside it."""
    setups = [("sqlite", 1)] + [("pg", k) for k in sz.daemons]
    got: dict[tuple[str, int], list[Ceiling]] = {s: [] for s in setups}
    failed: dict[tuple[str, int], Failed] = {}
    for _ in range(sz.runs):
        for backend, k in setups:
            res = C.attempt(f"ceiling {backend} {k}", W.ceiling, tmp, sz, k, backend)
            if "error" in res:
                failed[backend, k] = cast(Failed, res)
            else:
                got[backend, k].append(res)
    out: list[Ceiling | Failed] = []
    for setup in setups:
        runs = sorted(got[setup], key=lambda c: c["rate"])
        if not runs:
            out.append(failed[setup])
            continue
        middle = runs[len(runs) // 2]
        middle["rates"] = [c["rate"] for c in got[setup]]
        out.append(middle)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (development)")
    ap.add_argument("--only", default="1,2,3,4,5", help="workloads to run, e.g. 2,4")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument("--tmpdir", default=None, help="where temp dirs go (default: system temp)")
    ap.add_argument(
        "--from-json",
        metavar="FILE",
        help="no benchmark: render the report of a saved bench/results/*.json",
    )
    args = ap.parse_args()
    if args.from_json:
        C.render_saved(args.from_json, report, Sizes, MARKS, write=not args.no_write)
        return 0
    sz = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, C.on_signal)
    signal.signal(signal.SIGINT, C.on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-pg-", dir=args.tmpdir))
    started = time.time()
    info = C.machine()
    R: Results = {"uptime_start": uptime()}
    C.log(f"bench_pg {'quick' if args.quick else 'full'} in {tmp}; load {R['uptime_start']}")
    try:
        run(R, tmp, sz, set(args.only.split(",")))
    finally:
        C.kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
    R["uptime_end"] = uptime()
    elapsed = time.time() - started
    C.conclude("bench_pg", R, sz, info, elapsed, report, MARKS, write=not args.no_write)
    C.log(f"done in {elapsed / 60:.1f} min; load {R['uptime_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

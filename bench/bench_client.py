#!/usr/bin/env python
"""The shipped client's CPU per ``Client.enqueue`` call, before and after a change (issue 15).

Run ``python bench/bench_client.py`` (about 2 min). It starts one real ``jobctl daemon``
(SQLite, temp paths) and runs, in turn, one client process with the ``src/`` of the
``--before`` revision (default: ``main``) and one with the ``--after`` one (default:
``HEAD``; ``--worktree`` for the working tree), each a ``git archive`` snapshot on
``PYTHONPATH``, ``--rounds`` times interleaved: the two sides meet the same load on the
shared machine. Each process makes ``--warmup`` calls, then ``--calls`` calls of
``Client.enqueue({"command": ["true"], "run_at": FAR})`` one after another, and reads its
own user and system CPU time (``getrusage``) around them: what a Python producer program
pays per job, which on a 2-core machine is taken from the daemon and the database.
Results are printed and written to docs/benchmarks.md between the bench_client markers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402

MARK_START, MARK_END = "<!-- bench_client:start -->", "<!-- bench_client:end -->"
#: One client process: warm up, then CPU (user, system) and wall time per call, as JSON.
WORKER = """
import json, resource, sys, time
from pathlib import Path
from jobctl.client import Client
sock, warmup, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
job = {"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}
with Client(Path(sock)) as client:
    for _ in range(warmup):
        client.enqueue(job)
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(calls):
        client.enqueue(job)
    r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
print(json.dumps({"user": (r1.ru_utime - r0.ru_utime) / calls * 1e6,
                  "sys": (r1.ru_stime - r0.ru_stime) / calls * 1e6,
                  "wall": (w1 - w0) / calls * 1e6}))
"""


def run_side(src: str, sock: Path, warmup: int, calls: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(sock), str(warmup), str(calls)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got: dict[str, float] = json.loads(out)
    return got


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def steal_share() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return vals[7], sum(vals)


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    sides: list[tuple[str, str]] = []
    for rev in (args.before, args.after):
        if rev == "WORKTREE":
            sides.append((str(C.ROOT / "src"), "the working tree"))
        else:
            snapshot, short = C.extract_src(rev, tmp)
            sides.append((str(snapshot), f"{rev} ({short})"))
    daemon = C.Daemon(tmp / "d")
    runs: list[list[dict[str, float]]] = [[], []]
    load0 = load_average()
    st0 = steal_share()
    try:
        for _ in range(args.rounds):
            for i, (src, _name) in enumerate(sides):
                runs[i].append(run_side(src, daemon.sock, args.warmup, args.calls))
    finally:
        daemon.stop()
    st1 = steal_share()
    steal = 100 * (st1[0] - st0[0]) / max(1, st1[1] - st0[1])
    return {
        "sides": [name for _, name in sides],
        "runs": runs,
        "load": (load0, load_average()),
        "steal_pct": steal,
    }


def row(name: str, runs: list[dict[str, float]]) -> tuple[str, float]:
    cpu = [r["user"] + r["sys"] for r in runs]
    med = C.median(cpu)
    return (
        f"| {name} | {med:.0f} | {C.median([r['user'] for r in runs]):.0f} | "
        f"{C.median([r['sys'] for r in runs]):.0f} | {min(cpu):.0f}-{max(cpu):.0f} | "
        f"{C.median([r['wall'] for r in runs]):.0f} |",
        med,
    )


def report(res: dict[str, object], args: argparse.Namespace, command: str) -> str:
    names = res["sides"]
    runs = res["runs"]
    assert isinstance(names, list) and isinstance(runs, list)
    load = res["load"]
    assert isinstance(load, tuple)
    (before, b_med), (after, a_med) = row(names[0], runs[0]), row(names[1], runs[1])
    return "\n".join(
        [
            "## Client CPU per enqueue (`bench/bench_client.py`, issue 15)",
            "",
            f"Run on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: "
            f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}. One daemon (SQLite, "
            f"the after side's install); {args.rounds} client processes a side, the sides "
            f"interleaved, each {args.warmup} calls to warm up then {args.calls} timed "
            f"calls of `Client.enqueue` one after another. CPU is the client process's own "
            f"(getrusage, user + system) per call. Load average (1/5/15 min) {load[0]} at "
            f"the start, {load[1]} at the end; CPU steal {res['steal_pct']:.1f} %.",
            "",
            f"Command: `{command}`",
            "",
            "| client | CPU/call median (us) | user | system | range of runs | wall/call (us) |",
            "|---|---:|---:|---:|---|---:|",
            before,
            after,
            "",
            f"After/before CPU per call: {a_med / b_med:.2f}.",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="main")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--worktree", action="store_true", help="after: the working tree")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.worktree:
        args.after = "WORKTREE"
    command = "python bench/bench_client.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="bench_client_") as tmp:
        res = measure(args, Path(tmp))
    text = report(res, args, command.strip())
    print(text)
    C.save_json("bench_client", res)
    if not args.no_write:
        C.write_section((MARK_START, MARK_END), f"{MARK_START}\n\n{text}\n\n{MARK_END}")


if __name__ == "__main__":
    main()

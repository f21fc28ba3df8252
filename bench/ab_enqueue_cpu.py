"""Interleaved A/B of the daemon's CPU per enqueued job: two source trees (git revs),
a real daemon on a fresh store per run (SQLite file or PostgreSQL database), 8 lean
clients (``_clients.jobctl_enqueue_client``) one job per request (``--per N``: a batch of
N such jobs per request), due in 2099.

Per run: the daemon's CPU per job over the clients' common window (all threads, from
``/proc/PID/stat``), the event-loop thread's user CPU per job (``/proc/PID/task/PID``,
warm-up included), on PostgreSQL the committer threads' CPU per job (``jobctl-pg-commit-N``,
their native ids read once with ``py-spy dump``; warm-up included), the rate, the load
average and the steal over the run. Runs alternate A B, B A, … so that the machine's drift
falls on both sides.

    .venv/bin/python bench/ab_enqueue_cpu.py --a main --b HEAD --pairs 4 --backend both
    .venv/bin/python bench/ab_enqueue_cpu.py --per 500 --pairs 3 --backend pg
    .venv/bin/python bench/ab_enqueue_cpu.py --keyed --pairs 4 --backend pg

``--keyed``: each request's one job carries a key of its own (distinct keys: every one new).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
from core_harness import CpuSampler
from pg_harness import database

JOB = {"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}
BODY = json.dumps(JOB).encode()
TICK = os.sysconf("SC_CLK_TCK")


def _stat_times(path: str) -> tuple[int, int]:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime (fields 14, 15)


def _committer_tids(pid: int) -> list[int]:
    """Native ids of the daemon's ``jobctl-pg-commit-N`` threads (Python 3.11 does not
    name OS threads, so ``/proc`` cannot tell them: py-spy reads the interpreter's)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    try:
        out = subprocess.run(
            [spy, "dump", "--pid", str(pid)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(t) for t in re.findall(r'Thread (\d+) \([^)]*\): "jobctl-pg-commit-', out)]


def _threads_cpu(pid: int, tids: list[int]) -> float:
    """Seconds of CPU (user + system) of threads ``tids`` of ``pid``."""
    ticks = 0
    for tid in tids:
        with suppress(OSError):
            ticks += sum(_stat_times(f"/proc/{pid}/task/{tid}/stat"))
    return ticks / TICK


def _steal() -> tuple[int, int]:
    cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return cpu[7], sum(cpu)


def body(per: int, keyed: bool = False) -> bytes:
    """The request body: one job, or a batch of ``per`` (a list even of one); ``keyed``:
    one job with a key the client makes per request (``_clients.keyed_bodies``)."""
    if keyed:
        return json.dumps(JOB | {"key": "@KEY@"}).encode()
    return BODY if per == 1 else json.dumps([JOB] * per).encode()


def run(
    src: Path,
    backend: str,
    workdir: Path,
    seconds: float,
    clients: int,
    per: int = 1,
    keyed: bool = False,
) -> dict[str, Any]:
    """One daemon of tree ``src`` under the clients: its CPU per job and the conditions."""
    with database() if backend == "pg" else nullcontext("") as dsn:
        db = dsn or str(workdir / "jobctl.db")
        workdir.mkdir(parents=True, exist_ok=True)
        sock = workdir / "jobctl.sock"
        log_path = workdir / "daemon.log"
        cmd = [C.JOBCTL_BIN, "daemon", "--db", db, "--socket", str(sock)]
        cmd += ["--state-dir", str(workdir / "state")] if dsn else []
        env = C.clean_env(workdir) | {"PYTHONPATH": str(src)}
        with open(log_path, "wb") as log:
            proc = C.spawn(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
            try:
                C.wait_ready(proc, log_path, lambda: C.stop_proc(proc))
                tids = _committer_tids(proc.pid) if dsn else []
                commit0 = _threads_cpu(proc.pid, tids)
                loop0 = _stat_times(f"/proc/{proc.pid}/task/{proc.pid}/stat")[0]
                steal0, total0 = _steal()
                load0 = os.getloadavg()[0]
                sampler = CpuSampler(proc.pid)
                warm = 20 if per == 1 else 2  # requests per client before the window
                job = (str(sock), body(per, keyed), per, warm, seconds)
                res = C.run_clients(C.jobctl_enqueue_client, [job] * clients)
                sampler.stop()
                loop1 = _stat_times(f"/proc/{proc.pid}/task/{proc.pid}/stat")[0]
                commit1 = _threads_cpu(proc.pid, tids)
                steal1, total1 = _steal()
            finally:
                C.stop_proc(proc)
    t0, t1 = max(r["t0"] for r in res), min(r["last"] for r in res)
    rate = sum(r["jobs"] / (r["last"] - r["t0"]) for r in res)
    jobs = sum(r["jobs"] + r["warm_jobs"] for r in res)
    errors = sum(r["errors"] for r in res)
    return {
        "rate": rate,
        "cpu_us": 1e6 * sampler.cores(t0, t1) / rate,
        "loop_user_us": 1e6 * (loop1 - loop0) / TICK / jobs,
        "commit_us": 1e6 * (commit1 - commit0) / jobs if tids else float("nan"),
        "committers": len(tids),
        "errors": errors,
        "load": [load0, os.getloadavg()[0]],
        "steal_pct": 100 * (steal1 - steal0) / max(1, total1 - total0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--a", default="main")
    ap.add_argument("--b", default="HEAD")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--per", type=int, default=1, help="jobs per request (>1: a batch)")
    ap.add_argument("--backend", choices=("sqlite", "pg", "both"), default="both")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keyed", action="store_true", help="each job with a key of its own")
    args = ap.parse_args()
    if args.keyed and args.per != 1:
        ap.error("--keyed sends one job per request")
    backends = ("sqlite", "pg") if args.backend == "both" else (args.backend,)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ab-enq-") as tmpdir:
        tmp = Path(tmpdir)
        srcs = {side: C.extract_src(rev, tmp) for side, rev in (("A", args.a), ("B", args.b))}
        for pair in range(args.pairs):
            for backend in backends:
                order = ("A", "B") if pair % 2 == 0 else ("B", "A")
                for side in order:
                    src, rev = srcs[side]
                    wd = tmp / f"{backend}-{pair}-{side}"
                    got = run(src, backend, wd, args.seconds, args.clients, args.per, args.keyed)
                    row = {
                        "pair": pair,
                        "backend": backend,
                        "side": side,
                        "rev": rev,
                        "per": args.per,
                        "keyed": args.keyed,
                    }
                    row |= {"at": time.strftime("%H:%M:%S", time.gmtime())} | got
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    for backend in backends:
        mine = [r for r in rows if r["backend"] == backend]
        ratios = [
            b["cpu_us"] / a["cpu_us"]
            for p in range(args.pairs)
            for a in mine
            for b in mine
            if a["pair"] == b["pair"] == p and a["side"] == "A" and b["side"] == "B"
        ]
        for key in ("cpu_us", "loop_user_us", "commit_us", "rate"):
            med = {s: statistics.median(r[key] for r in mine if r["side"] == s) for s in "AB"}
            print(f"{backend} {key}: A {med['A']:.1f}  B {med['B']:.1f}")
        print(f"{backend} B/A cpu ratios: {[round(x, 2) for x in ratios]}")


if __name__ == "__main__":
    main()

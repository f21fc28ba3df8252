#!/usr/bin/env python
"""What the audit trail costs single-job enqueue: daemon CPU per request, and rate.

Runs a daemon of a base revision (default ``main``, from ``git archive``) and one of the
working tree's ``src/`` in turns, ``--pairs`` times: each takes 8 client processes sending
``--requests`` single-job enqueues each (after a warm-up), and reports the daemon's CPU
time (user + system, from /proc) per request and the request rate. CPU per request is
the figure to compare on a shared machine: the rate follows whatever else runs.

    python bench/bench_audit.py --pairs 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from multiprocessing import Process
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = {"command": ["true"], "run_at": "2099-01-01T00:00:00Z", "cwd": "/"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(sock: str, n: int) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from jobctl.client import Client

    with Client(Path(sock)) as c:
        for _ in range(n):
            c.enqueue(JOB)


def clients(sock: Path, count: int, n: int) -> None:
    procs = [Process(target=client, args=(str(sock), n)) for _ in range(count)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


def run(src: Path, count: int, n: int) -> tuple[float, float]:
    d = Path(tempfile.mkdtemp(prefix="jobctl-bench-audit-"))
    sock = d / "jobctl.sock"
    cmd = [sys.executable, "-c", "from jobctl.cli.main import entry; entry()", "daemon",
           "--db", str(d / "jobctl.db"), "--socket", str(sock)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(src))
    daemon = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    try:
        while not sock.exists():
            time.sleep(0.05)
        clients(sock, count, 50)  # warm-up
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        clients(sock, count, n)
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(d, ignore_errors=True)
    return (cpu1 - cpu0) / (count * n) * 1e6, count * n / (t1 - t0)


def snapshot(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"],
                             check=True, capture_output=True).stdout  # fmt: skip
    path = into / "base.tar"
    path.write_bytes(archive)
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="main", help="revision to compare with")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=1500, help="per client")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="jobctl-bench-audit-base-"))
    sources = {"base": snapshot(args.base, base), "tree": ROOT / "src"}
    got: dict[str, list[tuple[float, float]]] = {"base": [], "tree": []}
    try:
        for _ in range(args.pairs):
            for name, src in sources.items():
                us, rate = run(src, args.clients, args.requests)
                got[name].append((us, rate))
                print(f"{name}: {us:.1f} µs CPU/request, {rate:,.0f} requests/s", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for name, runs in got.items():
        cpu = statistics.median(u for u, _ in runs)
        rate = statistics.median(r for _, r in runs)
        print(f"{name} median: {cpu:.1f} µs CPU/request, {rate:,.0f} requests/s")
    print(json.dumps(got))


if __name__ == "__main__":
    main()

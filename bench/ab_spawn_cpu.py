#!/usr/bin/env python3
"""Interleaved A/B of the daemon's CPU per end-to-end job (issue 17): two source trees,
``bench_spawn_e2e``'s daemon (spawn helper, SQLite, 16 slots, the bench's own user), N
``true`` due at once, per run.

Per run: jobs/s (due to the last finish), the daemon's CPU per job split by thread (the
event loop, the store's writer: the busiest other thread, the rest), the spawn helper's
and the commands' CPU per job, the load average before and after. Runs go A B, B A, …
so the machine's drift falls on both sides; the runs' directories are removed only at
the end (ext4's ``recently_deleted`` scan, see ``bench_spawn_e2e.Daemon.stop``), and a
pause between runs lets the previous one's commands be reaped.

    flock /tmp/bench.lock .venv/bin/python bench/ab_spawn_cpu.py --a /tmp/main-src \\
        --b src --pairs 4 --jobs 5000

``--a-as another --b-as own`` (root): the same tree for both sides, another user's jobs
against the daemon's own user's (issue 17: what the other-user path costs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_spawn_e2e as E

TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> dict[str, tuple[int, int]]:
    """utime, stime of each thread of ``pid`` (Python 3.11 does not name OS threads)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[task.name] = (int(fields[11]), int(fields[12]))
    return out


def _switches(pid: int) -> int:
    """Voluntary context switches of ``pid``'s main thread (its loop's sleeps)."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def run(src: str, n: int, log_level: str, user: str | None = None) -> dict[str, float]:
    """One run: ``n`` ``true`` of the bench's own user, or of ``user`` (enqueued by it)."""
    d = E.Daemon(src, "helper", user, log_level)  # its group may reach the socket
    try:
        due = datetime.now(UTC) + timedelta(seconds=2.0 + n / 5000)
        d.enqueue(E.jobs_due(n, due, ["true"]), user)
        helpers = E.children_of(d.proc.pid)
        load0 = os.getloadavg()[0]
        t0, w0 = _threads(d.proc.pid), _switches(d.proc.pid)
        h0 = [(E.cpu_ticks(h), E.cpu_ticks(h, True)) for h in helpers]
        d.wait_succeeded(n)
        t1, w1 = _threads(d.proc.pid), _switches(d.proc.pid)
        h1 = [(E.cpu_ticks(h), E.cpu_ticks(h, True)) for h in helpers]
        times = d.times()
    finally:
        d.stop()
    per = 1e6 / TICK / n
    delta = {t: (u - t0.get(t, (0, 0))[0], s - t0.get(t, (0, 0))[1]) for t, (u, s) in t1.items()}
    loop = delta.pop(str(d.proc.pid))
    others = sorted(delta.values(), key=sum, reverse=True)
    writer = others[0] if others else (0, 0)
    rest = sum(sum(x) for x in others[1:])
    return {
        "rate": n / (max(f for _, _, f in times) - due.timestamp()),
        # a claim stamps its attempts' started_at: distinct stamps ~ claims
        "per_claim": n / len({s for _, s, _ in times}),
        "daemon": (sum(loop) + sum(writer) + rest) * per,
        "user": (loop[0] + writer[0] + sum(u for u, _ in others[1:])) * per,
        "loop": sum(loop) * per,
        "loop_sys": loop[1] * per,
        "writer_sys": writer[1] * per,
        "writer": sum(writer) * per,
        "rest": rest * per,
        "helper": sum(b[0] - a[0] for a, b in zip(h0, h1, strict=True)) * per,
        "commands": sum(b[1] - a[1] for a, b in zip(h0, h1, strict=True)) * per,
        "sleeps": (w1 - w0) / n,
        "load0": load0,
        "load1": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="src/ of tree A")
    ap.add_argument("--b", required=True, help="src/ of tree B")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--pause", type=float, default=5.0, help="seconds between runs")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="runs of A first, not counted (the bench first waits out ext4's window after"
        " the last removal of a spawn bench's files: bench_spawn_e2e.wait_inodes_quiet)",
    )
    ap.add_argument("--log-level", default="warning", help="the daemons' (info: the default)")
    for side in "ab":
        ap.add_argument(
            f"--{side}-as",
            choices=("own", "another"),
            default="own",
            help=f"whose jobs run {side.upper()} (another: a temporary account)",
        )
    ap.add_argument(
        "--no-inode-wait",
        action="store_true",
        help="do not wait out ext4's window after a previous bench's removal",
    )
    args = ap.parse_args()
    E.wait_inodes_quiet(not args.no_inode_wait)
    srcs = {"A": str(Path(args.a).resolve()), "B": str(Path(args.b).resolve())}
    other = E.bench_user() if "another" in (args.a_as, args.b_as) else None
    users = {"A": other if args.a_as == "another" else None,
             "B": other if args.b_as == "another" else None}  # fmt: skip
    got: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    print(f"A={srcs['A']} ({args.a_as}) B={srcs['B']} ({args.b_as}) jobs={args.jobs}"
          f" log-level={args.log_level}"
          f" ({time.strftime('%H:%M:%S')} UTC)")  # fmt: skip
    print(
        "pair run  jobs/s daemon(user) loop(sys) writer(sys) rest helper commands"
        " per-claim loop-sleeps/job load"
    )
    try:
        for _ in range(args.warmup):
            r = run(srcs["A"], args.jobs, args.log_level, users["A"])
            rate, helper = r["rate"], r["helper"]
            print(f"warm-up A: {rate:.0f} jobs/s, helper {helper:.0f} us/job (not counted)")
            time.sleep(args.pause)
        for i in range(args.pairs):
            for side in "AB" if i % 2 == 0 else "BA":
                r = run(srcs[side], args.jobs, args.log_level, users[side])
                got[side].append(r)
                print(f"{i:>4} {side:<3} {r['rate']:>7.0f} {r['daemon']:>7.0f} ({r['user']:.0f})"
                      f" {r['loop']:>6.0f} ({r['loop_sys']:.0f}) {r['writer']:>6.0f}"
                      f" ({r['writer_sys']:.0f}) {r['rest']:>4.0f}"
                      f" {r['helper']:>7.0f} {r['commands']:>8.0f} {r['per_claim']:>10.1f}"
                      f" {r['sleeps']:.2f}"
                      f"  {r['load0']:.1f}-{r['load1']:.1f}", flush=True)  # fmt: skip
                time.sleep(args.pause)
    finally:
        E.remove_left()
        if other:
            subprocess.run(["userdel", "-r", other], capture_output=True, check=False)
    for side in "AB":
        rs = got[side]
        if rs:
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"median {side}: {med['rate']:.0f} jobs/s, daemon {med['daemon']:.0f} us/job"
                  f" (loop {med['loop']:.0f}, writer {med['writer']:.0f}), helper"
                  f" {med['helper']:.0f}, commands {med['commands']:.0f}, jobs per claim"
                  f" {med['per_claim']:.1f}")  # fmt: skip
    print(f"({time.strftime('%H:%M:%S')} UTC)")


if __name__ == "__main__":
    main()

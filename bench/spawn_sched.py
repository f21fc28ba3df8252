#!/usr/bin/env python3
"""Where issue 17's start pipeline leaves the CPUs idle: one end-to-end run under
``perf sched record``.

Runs N `true` jobs due at once through a daemon (spawn helper, the daemon's own user, as
bench_spawn_e2e's first e2e row) and records the kernel scheduler on every CPU for a
window in the middle of the drain. From ``perf sched timehist`` it prints, for that
window: the CPU time of the daemon's event loop (its main thread), its other threads
(the store's writer, mostly), the spawn helper, the commands, everything else and idle;
how many commands were alive at once (share of the window's time); while one CPU was
idle, what the other one ran; and how long tasks waited to run on one CPU while another
idled (the kernel's wake-up placement). Why: the e2e rate is not the CPUs' limit (they stay
15-25% idle) and not the slots' (session 21: at most 4 of 16 `true`s alive at any
instant); this shows which step of the chain the idle waits on, run after run.

A command counts as alive from the start of its first stretch on a CPU under the name
``true`` to the end of its last, i.e. once it has exec'd; before that the helper's child
runs under the helper's name with a pid of its own and counts as "other".

usage: python bench/spawn_sched.py [--jobs N] [--concurrency N] [--skip S] [--window S]
       [--src DIR] [--no-inode-wait]
Needs ``perf`` (Debian's linux-perf) and the right to trace every CPU (root here).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bench_spawn_e2e as E  # noqa: E402

#: One line of ``perf sched timehist``: time, [cpu], task[tid/pid] or <idle>, wait time,
#: scheduling delay, run time (ms).
_LINE = re.compile(
    r"^\s*(?P<t>\d+\.\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<task>.+?)\s+"
    r"(?P<wait>[\d.]+)\s+(?P<delay>[\d.]+)\s+(?P<run>[\d.]+)\s*$"
)
_TASK = re.compile(r"^(?P<comm>.*)\[(?P<tid>\d+)(?:/(?P<pid>\d+))?\]$")
COMMAND = "commands"


@dataclass(frozen=True)
class Slice:
    """One stretch a task (or idle) ran on a CPU: [start, end] in seconds."""

    start: float
    end: float
    cpu: int
    who: str  # the class: loop, daemon threads, helper, commands, other, idle
    pid: int  # the task's thread id (0 for idle)
    delay: float = 0.0  # how long it was runnable before this stretch (sch delay), s


def classify(comm: str, tid: int, pid: int, daemon: int, helpers: set[int]) -> str:
    if daemon in (pid, tid):
        return "daemon loop" if tid == daemon else "daemon threads"
    if pid in helpers or tid in helpers:
        return "helper"
    return COMMAND if comm == "true" else "other"


def parse(text: str, daemon: int, helpers: set[int]) -> list[Slice]:
    """The slices of a ``perf sched timehist`` listing (its header lines skipped)."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        end, run = float(m["t"]), float(m["run"]) / 1000
        task = m["task"].strip()
        if task.startswith("<idle>"):
            who, tid = "idle", 0
        else:
            t = _TASK.match(task)
            if t is None:
                continue
            tid = int(t["tid"])
            pid = int(t["pid"] or tid)
            who = classify(t["comm"], tid, pid, daemon, helpers)
        delay = float(m["delay"]) / 1000
        out.append(Slice(end - run, end, int(m["cpu"]), who, tid, delay))
    return out


def shares(slices: list[Slice]) -> dict[str, float]:
    """CPU time (ms) per class."""
    c: dict[str, float] = {}
    for s in slices:
        c[s.who] = c.get(s.who, 0.0) + (s.end - s.start) * 1000
    return c


def alive(slices: list[Slice], steps: int = 4000) -> dict[int, float]:
    """How many commands were alive at once: {count: share of the window, 0..1}."""
    life: dict[int, tuple[float, float]] = {}
    for s in slices:
        if s.who == COMMAND:
            a, b = life.get(s.pid, (s.start, s.end))
            life[s.pid] = (min(a, s.start), max(b, s.end))
    if not slices:
        return {}
    t0, t1 = min(s.start for s in slices), max(s.end for s in slices)
    spans = sorted(life.values())
    c: Counter[int] = Counter()
    for i in range(steps):
        x = t0 + (t1 - t0) * (i + 0.5) / steps
        c[sum(1 for a, b in spans if a <= x <= b)] += 1
    return {k: v / steps for k, v in c.items()}


def _idle_overlap(
    spans: list[tuple[float, float, int, str]], slices: list[Slice]
) -> dict[str, float]:
    """ms per class of the spans (start, end, cpu, class) that fell while another CPU
    idled, overlaps summed."""
    idles = [s for s in slices if s.who == "idle"]
    c: dict[str, float] = {}
    for start, end, cpu, who in spans:
        for idle in idles:
            overlap = min(idle.end, end) - max(idle.start, start)
            if idle.cpu != cpu and overlap > 0:
                c[who] = c.get(who, 0.0) + overlap * 1000
    return c


def beside_idle(slices: list[Slice]) -> dict[str, float]:
    """While a CPU idled: what the other CPUs ran (ms per class, overlap summed)."""
    return _idle_overlap([(s.start, s.end, s.cpu, s.who) for s in slices], slices)


def runnable_beside_idle(slices: list[Slice]) -> dict[str, float]:
    """Time (ms per class) a task waited to run on one CPU while another CPU idled: the
    part of the idle that the kernel's placement, not a lack of work, left."""
    waits = [(s.start - s.delay, s.start, s.cpu, s.who) for s in slices if s.delay > 0]
    return _idle_overlap([w for w in waits if w[3] != "idle"], slices)


def _by_size(c: dict[str, float]) -> str:
    return ", ".join(f"{w} {ms:.0f}" for w, ms in sorted(c.items(), key=lambda kv: -kv[1]))


def report(slices: list[Slice]) -> str:
    """The window's figures, as printed."""
    cpus = len({s.cpu for s in slices}) or 1
    window = (max(s.end for s in slices) - min(s.start for s in slices)) if slices else 0.0
    total = cpus * window * 1000 or 1.0
    out = [f"window {window:.1f} s on {cpus} CPUs ({total:.0f} ms of CPU):"]
    for who, ms in sorted(shares(slices).items(), key=lambda kv: -kv[1]):
        out.append(f"  {who:15s} {ms:7.0f} ms  {100 * ms / total:5.1f}%")
    dist = alive(slices)
    out.append(
        "commands alive at once (share of the window): "
        + ", ".join(f"{k}: {100 * v:.0f}%" for k, v in sorted(dist.items()))
    )
    out.append("beside an idle CPU, the other ran (ms): " + _by_size(beside_idle(slices)))
    out.append(
        "runnable but waiting while another CPU idled (ms): "
        + _by_size(runnable_beside_idle(slices))
    )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=8000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--skip", type=float, default=1.0, help="seconds after due first")
    ap.add_argument("--window", type=float, default=1.0, help="seconds recorded")
    ap.add_argument("--src", default=str(BENCH.parent / "src"))
    ap.add_argument("--no-inode-wait", action="store_true")
    a = ap.parse_args()
    if shutil.which("perf") is None:
        print("spawn_sched: error: needs perf (Debian's linux-perf)", file=sys.stderr)
        return 2
    E.wait_inodes_quiet(not a.no_inode_wait)
    tmp = Path(tempfile.mkdtemp(prefix="bspawn-sched-"))
    daemon: list[int] = []  # the daemon's pid, and its helpers', as `record` found them
    helpers: set[int] = set()

    def record(d: E.Daemon, due: datetime) -> None:
        daemon.append(d.proc.pid)
        helpers.update(E.children_of(d.proc.pid))
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds() + a.skip))
        out = str(tmp / "sched.data")
        cmd = ["perf", "sched", "record", "-a", "-o", out, "--", "sleep", str(a.window)]
        subprocess.run(cmd, check=True, capture_output=True)

    try:
        e = E.e2e(a.src, "helper", a.jobs, None, a.concurrency, record)
        listing = subprocess.run(
            ["perf", "sched", "timehist", "-i", str(tmp / "sched.data")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        E.remove_left()
        shutil.rmtree(tmp, ignore_errors=True)
    slices = parse(listing, daemon[0], helpers)
    print(
        f"{a.jobs} x true, concurrency {a.concurrency}: {e['rate']:.0f} jobs/s; CPU per job "
        f"daemon {e['daemon_us_per_job']:.0f} us, helper {e['helper_us_per_job']:.0f} us, "
        f"commands {e['commands_us_per_job']:.0f} us"
    )
    print(report(slices))
    return 0


if __name__ == "__main__":
    sys.exit(main())

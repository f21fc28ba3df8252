#!/usr/bin/env python3
"""What a `true` started by jobctl's spawn helper costs in CPU that a raw ``posix_spawn``
one does not (issue 17), one difference toggled at a time.

Drives the helper's own start path in this process (spawnstart.Starter with the
launcher's library, spawnnative.Native, and a cgroup pool, cgpool.Pool, as the helper
has them; no socket, no daemon): ``start_gated`` as a request of a root daemon's own
user's ``true`` job reaches it (the launcher's words with the output cap, ``true``
looked up on the job's ``PATH``, jobctl's environment, a new log file per start, a cgroup
per attempt), and variants of it that each drop or change one thing; plus the raw
``os.posix_spawn`` of ``/bin/true`` of bench_spawn.py. 16 in flight, reaped with
``os.wait4``: the children's CPU is the sum of their rusage (user + system); this
process's (the "helper") is its own rusage over the block (the start path, the log's
creation, the cgroup's making and removal, the reap, the loop). Variants run in blocks
of ``--block`` starts, in a rotating order, ``--rounds`` times (each round's order the
reverse of the last), so the machine's drift falls on all of them.

    flock /tmp/bench.lock .venv/bin/python bench/bench_childcpu.py --block 250 --rounds 8

Needs root (a writable cgroup v2 and a built launcher library).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jobctl.engine import cgroup, launcher
from jobctl.engine.cgpool import Pool
from jobctl.engine.spawnnative import Native
from jobctl.engine.spawnstart import Starter

INFLIGHT = 16
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The output cap of a root daemon's commands (``log_bytes`` 1 GiB) in 512-byte blocks.
CAP_BLOCKS = str(2**30 // 512)


def jobctl_env(n: int) -> dict[str, str]:
    """An environment as commandline.command_env makes it for root's job ``n``."""
    return {
        "PATH": ROOT_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root",
        "SHELL": "/bin/bash", "LANG": "C.UTF-8", "JOBCTL_JOB_ID": str(n),
        "JOBCTL_JOB_KEY": f"job-{n:08d}-0123456789abcdef", "JOBCTL_ATTEMPT": "1",
        "JOBCTL_GENERATION": "1", "JOBCTL_QUEUE": "default",
        "JOBCTL_LEASE_OWNER": "bench:4242:0123456789abcdef",
    }  # fmt: skip


@dataclass
class Variant:
    """One way of starting ``true``: what differs from the jobctl start (``base``)."""

    name: str
    cgroup: str = "fresh"  # fresh (made and removed per start), pool, none
    env: str = "jobctl"  # jobctl, path (PATH=/usr/bin:/bin only)
    word: str = "true"  # the command's word (looked up on PATH) or /bin/true
    out: str = "log"  # log (a new file per start) or null (/dev/null)
    cap: bool = True  # the output cap (RLIMIT_FSIZE in the child)
    cwd: str = "/tmp"
    raw: bool = False  # os.posix_spawn of /bin/true as bench_spawn.py does
    setsid: bool = True  # raw only
    burn: int = 0  # CPU-bound processes running beside the block (the e2e's daemon, helper)
    lang: bool = True  # LANG=C.UTF-8 in jobctl's environment
    runs: list[tuple[float, float, float, float]] = field(default_factory=list)


VARIANTS = [
    Variant("jobctl: clone3 into a fresh cgroup, cap, env, log"),
    Variant("  cgroup from the pool", cgroup="pool"),
    Variant("  no cgroup", cgroup="none"),
    Variant("  env PATH=/usr/bin:/bin only", env="path"),
    Variant("  /bin/true (no PATH search)", word="/bin/true"),
    Variant("  output /dev/null (no log file)", out="null"),
    Variant("  no output cap", cap=False),
    Variant(
        "  all four above, no cgroup",
        cgroup="none",
        env="path",
        word="/bin/true",
        out="null",
        cap=False,
    ),
    Variant("raw posix_spawn /bin/true, /dev/null", raw=True),
    Variant("  raw, no setsid", raw=True, setsid=False),
    Variant("  raw, jobctl env + log file", raw=True, env="jobctl", out="log"),
    Variant("jobctl, one CPU-bound process beside", burn=1),
    Variant("raw, one CPU-bound process beside", raw=True, burn=1),
    Variant("jobctl, date (not true)", word="date"),
    Variant("  date, jobctl env without LANG=C.UTF-8", word="date", lang=False),
]


class Bench:
    """The helper's pieces, and one block of starts of one variant."""

    def __init__(self, logs: str) -> None:
        cgs, why = cgroup.detect("auto")
        lib = launcher.library(launcher.default())
        if cgs is None or lib is None:
            raise SystemExit(f"needs root, cgroup v2 and the launcher library: {why}")
        self.base = str(cgs.base)
        self.native = Native(lib)
        self.pool = Pool(cgs.pool_prefix(f"bench:{os.getpid()}:childcpu"))
        self.fresh = Starter(self.native, None)
        self.pooled = Starter(self.native, self.pool)
        self.logs, self.seq = logs, 0
        self.null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)

    def starter(self, v: Variant) -> tuple[Callable[[], int], Callable[[int], None]]:
        """(start one, after its reap) for ``v``."""
        if v.raw:
            return self.raw_start(v), lambda pid: None
        starter = self.pooled if v.cgroup == "pool" else self.fresh
        cgs: dict[int, str | None] = {}

        def start() -> int:
            self.seq += 1
            n = self.seq
            env = jobctl_env(n) if v.env == "jobctl" else {"PATH": "/usr/bin:/bin"}
            if not v.lang:
                del env["LANG"]
            words = [self.native.launcher, "-", "-", "-", v.cwd, "",
                     CAP_BLOCKS if v.cap else "", "", "--", v.word]  # fmt: skip
            log = f"{self.logs}/{n % 64}/{n}.log" if v.out == "log" else os.devnull
            cg = None if v.cgroup == "none" else f"{self.base}/bench-childcpu-{n}"
            pid, got, error = starter.start_gated(words, env, None, log, None, False, cg, {}, None)
            if cg is not None and got is None:
                raise SystemExit(f"no cgroup: {error}")
            cgs[pid] = got
            return pid

        def reaped(pid: int) -> None:
            got = cgs.pop(pid)
            if got is None:
                return
            if v.cgroup == "pool":
                self.pool.exited(got)
                self.pool.release(got)
            else:
                os.rmdir(got)

        return start, reaped

    def raw_start(self, v: Variant) -> Callable[[], int]:
        null = self.null

        def start() -> int:
            self.seq += 1
            n = self.seq
            out, env = null, {"PATH": "/usr/bin:/bin"}
            if v.out == "log":
                out = self.fresh.open_log(f"{self.logs}/{n % 64}/{n}.log")
                env = jobctl_env(n)
            acts = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, out, 2)]  # fmt: skip
            try:
                return os.posix_spawn("/bin/true", ["/bin/true"], env, file_actions=acts,
                                      setsid=v.setsid)  # fmt: skip
            finally:
                if out != null:
                    os.close(out)

        return start

    def block(self, v: Variant, n: int) -> tuple[float, float, float, float]:
        """``n`` starts of ``v``, 16 in flight: (children µs, this process's µs per start,
        starts/s, children µs by ``os.times``: in ticks, as the e2e bench reads them)."""
        start, reaped = self.starter(v)
        child = 0.0
        live = 0
        burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"])
                   for _ in range(v.burn)]  # fmt: skip
        if burners:
            time.sleep(0.2)
        c0 = os.times()
        me0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(n):
            if live >= INFLIGHT:
                child += self.reap(reaped)
                live -= 1
            start()
            live += 1
        while live:
            child += self.reap(reaped)
            live -= 1
        wall = time.perf_counter() - t0
        me1 = resource.getrusage(resource.RUSAGE_SELF)
        c1 = os.times()
        for b in burners:
            b.kill()
            b.wait()
        me = me1.ru_utime - me0.ru_utime + me1.ru_stime - me0.ru_stime
        # cutime + cstime as /proc reports them (the e2e bench's "commands"), a check
        ticks = c1.children_user - c0.children_user + c1.children_system - c0.children_system
        return child / n * 1e6, me / n * 1e6, n / wall, ticks / n * 1e6

    @staticmethod
    def reap(reaped: Callable[[int], None]) -> float:
        pid, status, ru = os.wait4(-1, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"a child exited {os.waitstatus_to_exitcode(status)}")
        reaped(pid)
        return ru.ru_utime + ru.ru_stime


def calibrate() -> float:
    """Seconds of a 3M-addition Python loop (the VM's speed now)."""
    t0 = time.perf_counter()
    s = 0
    for i in range(3_000_000):
        s += i
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", type=int, default=250, help="starts per variant per round")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument(
        "--only", default="", help="comma-separated variant numbers (as a full run prints them)"
    )
    args = ap.parse_args()
    chosen = [VARIANTS[int(i)] for i in args.only.split(",")] if args.only else VARIANTS
    logs = tempfile.mkdtemp(prefix="bench-childcpu-", dir="/var/tmp")  # the root disk
    bench = Bench(logs)
    print(f"calibration {calibrate():.3f} s, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%H:%M:%S')} UTC, logs in {logs}", flush=True)  # fmt: skip
    try:
        for v in chosen:  # warm-up: page cache, the pool's slots, the log directories
            bench.block(v, 50)
        for r in range(args.rounds):
            shift = r % len(chosen)
            order = chosen[shift:] + chosen[:shift]
            for v in order if r % 2 == 0 else order[::-1]:
                v.runs.append(bench.block(v, args.block))
    finally:
        bench.pool.close()
        shutil.rmtree(logs, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M:%S')} UTC, "
          f"{args.block * args.rounds} starts per variant (median of {args.rounds} blocks; "
          "children, this process in min-max)")  # fmt: skip
    print(f"{'variant':48s} {'children µs':>18s} {'helper µs':>14s} {'starts/s':>9s} cutime")
    for v in chosen:
        i = VARIANTS.index(v)
        kids, me, rate, cut = (sorted(x[k] for x in v.runs) for k in range(4))
        print(f"{i:>2} {v.name:45s} {statistics.median(kids):6.0f} ({kids[0]:.0f}-{kids[-1]:.0f})"
              f" {statistics.median(me):5.0f} ({me[0]:.0f}-{me[-1]:.0f})"
              f" {statistics.median(rate):8.0f} {statistics.median(cut):6.0f}")  # fmt: skip


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The spawn helper's CPU per start with a cgroup each (issue 17, branch cgpool).

Starts N ``true`` through a spawn helper over its socket (16 in flight, output to
/dev/null, after 200 starts of warm-up), each in a cgroup, and prints the helper's CPU
(user + system, ``/proc/PID/stat``) per start. ``plain``: the command alone (a job of the
daemon's own user without an output cap); ``launcher``: in the launcher's words (an
output cap, or another user). With a tree that has the pool (engine/cgpool.py) the
helper uses it; an older tree makes and removes a cgroup per start. Needs a writable
cgroup v2 (root); alternate trees with PYTHONPATH=TREE/src to compare.

usage: python bench/bench_cgpool.py [N] [plain|launcher]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from jobctl.engine import cgroup
from jobctl.engine.spawnclient import Limits, SpawnHelper


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def run(n: int, mode: str) -> str:
    cgs, why = cgroup.detect("auto")
    if cgs is None:
        raise SystemExit(f"no writable cgroup v2: {why}")
    owner = f"bench:{os.getpid()}:cgpool"
    kw: dict[str, Any] = {}
    if hasattr(cgs, "pool_prefix"):
        kw["pool"] = cgs.pool_prefix(owner)
    helper = SpawnHelper(0o077, None, "cgpool-bench", **kw)
    helper.start(asyncio.get_running_loop())
    assert helper.pid is not None
    launcher = helper.launcher
    if mode != "plain" and launcher is None:
        raise SystemExit("no launcher here")
    words: list[str] = []
    if mode != "plain" and launcher is not None:
        words = [launcher, "-", "-", "-", "/", "", "", "", "--"]
    prefix, env, gate = cgroup.owner_prefix(owner), {"PATH": "/usr/bin:/bin"}, asyncio.Semaphore(16)

    async def one(k: int) -> None:
        async with gate:
            lim = Limits(f"{cgs.base}/{prefix}{k}.1")
            child = await helper.spawn([*words, "true"], env, None if words else "/",
                                       "/dev/null", None, {}, lim)  # fmt: skip
            await child.exited
            release = getattr(child, "release", None)
            if release is not None:
                release()  # the daemon's hand-back (proctree.end)
            elif child.cgroup is not None and not child.cgroup_removed:
                os.rmdir(child.cgroup)

    try:
        await asyncio.gather(*(one(k) for k in range(200)))
        before, start = cpu_ticks(helper.pid), time.perf_counter()
        await asyncio.gather(*(one(k) for k in range(200, 200 + n)))
        used, wall = cpu_ticks(helper.pid) - before, time.perf_counter() - start
    finally:
        helper.close()
    per = used / os.sysconf("SC_CLK_TCK") / n * 1e6
    return (
        f"{mode:8s} pool={'pool' in kw!s:5s} helper {per:4.0f} us/start  {n / wall:5.0f} starts/s"
    )


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    print(asyncio.run(run(count, sys.argv[2] if len(sys.argv) > 2 else "plain")))

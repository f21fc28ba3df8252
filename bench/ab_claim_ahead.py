#!/usr/bin/env python3
"""Interleaved A/B of two trees' end-to-end `true` rate, with claims, commits and spawn
messages per job (issue 17, branch ahead: claims ahead of free slots).

Each round runs every variant once (the order reversed every other round), each a fresh
daemon with N `true` jobs due at once (``bench_spawn_e2e.e2e``: SQLite, spawn helper,
``--concurrency 16``), and prints jobs/s, the daemon's, helper's and commands' CPU per
job, and what a counting shim saw in the daemon: timer claims, writer commits, jobs that
waited in the ready queue, spawn messages. The shim is a ``sitecustomize`` put on the
daemon's PYTHONPATH (it patches nothing but counters around ``Writer._commit``,
``AsyncStore.claim_due``, ``ReadyQueue.add`` and ``SpawnHelper._flush``). With ``lag``,
``bench_spawn_e2e.lag`` instead (200 jobs over 2 s: attempt start - run_at).

The attempts' files are removed only at the end: a removal of thousands of files makes the
next minute's file creations dearer on ext4 (``recently_deleted``), which would favour
whichever variant runs first in a round.

usage: python bench/ab_claim_ahead.py ROUNDS JOBS [e2e|lag] VARIANT,...
       VARIANT: TREE or TREE:N (claim_ahead = N through JOBCTL_CLAIM_AHEAD), TREE a
       directory holding src/ (e.g. /work/main:0,/work/wt-ahead:8)
Run it under ``flock /tmp/bench.lock`` on a shared machine.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bench_spawn_e2e as b  # noqa: E402

_SHIM = """
import os, sys
_d = os.environ.get("AB_COUNT_DIR")
if _d and "jobctl" in sys.orig_argv and "daemon" in sys.orig_argv:
    import atexit, json
    n = {"commits": 0, "claims": 0, "claimed": 0, "ahead": 0, "messages": 0}
    from jobctl.store import writer as _w
    _c = _w.Writer._commit
    def _commit(self, conn, batch):
        n["commits"] += 1
        return _c(self, conn, batch)
    _w.Writer._commit = _commit
    from jobctl.store import aio as _a
    _cd = _a.AsyncStore.claim_due
    async def claim_due(self, owner, limit, ttl):
        r = await _cd(self, owner, limit, ttl)
        n["claims"] += 1
        n["claimed"] += len(r)
        return r
    _a.AsyncStore.claim_due = claim_due
    try:
        from jobctl.engine import ahead as _ah
        _add = _ah.ReadyQueue.add
        def add(self, claim):
            n["ahead"] += 1
            return _add(self, claim)
        _ah.ReadyQueue.add = add
    except ImportError:
        pass
    from jobctl.engine import spawnclient as _sc
    _fl = _sc.SpawnHelper._flush
    def _flush(self):
        before = self.messages
        _fl(self)
        n["messages"] += self.messages - before
    _sc.SpawnHelper._flush = _flush
    def _dump():
        with open(os.path.join(_d, f"{os.getpid()}.json"), "w") as f:
            f.write(json.dumps(n))
    atexit.register(_dump)
"""


def counts(where: str) -> dict[str, int]:
    total = {"commits": 0, "claims": 0, "claimed": 0, "ahead": 0, "messages": 0}
    for name in os.listdir(where):
        for key, value in json.loads(Path(where, name).read_text()).items():
            total[key] += value
    return total


def one(variant: str, n: int, mode: str, site: str) -> None:
    tree, _, ahead = variant.partition(":")
    where = tempfile.mkdtemp(prefix="abcount-")
    os.environ["AB_COUNT_DIR"] = where
    if ahead:
        os.environ["JOBCTL_CLAIM_AHEAD"] = ahead
    else:
        os.environ.pop("JOBCTL_CLAIM_AHEAD", None)
    load = os.getloadavg()[0]
    src = f"{tree}/src:{site}"
    stamp = time.strftime("%H:%M:%S")
    if mode == "lag":
        lg = b.lag(src, "helper", n)
        c = counts(where)
        print(f"{stamp} {variant:20s} load {load:.2f}: lag p50 {lg['p50']:.1f} p99 {lg['p99']:.1f} "
              f"max {lg['max']:.1f} ms; claims/job {c['claims'] / n:.3f} "
              f"commits/job {c['commits'] / n:.3f}", flush=True)  # fmt: skip
        return
    e = b.e2e(src, "helper", n, None)
    c = counts(where)
    print(f"{stamp} {variant:20s} load {load:.2f}: {e['rate']:6.0f} jobs/s; daemon "
          f"{e['daemon_us_per_job']:.0f} helper {e['helper_us_per_job']:.0f} commands "
          f"{e['commands_us_per_job']:.0f} us/job; claims/job {c['claims'] / n:.3f} "
          f"(jobs/claim {c['claimed'] / max(1, c['claims']):.1f}) commits/job "
          f"{c['commits'] / n:.3f}; claimed ahead/job {c['ahead'] / n:.2f}; "
          f"starts/message {n / max(1, c['messages']):.1f}", flush=True)  # fmt: skip


def main() -> None:
    rounds, n, mode, variants = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    names = variants.split(",")
    site = tempfile.mkdtemp(prefix="abshim-")
    Path(site, "sitecustomize.py").write_text(_SHIM)
    try:
        for i in range(rounds):
            for variant in names if i % 2 == 0 else names[::-1]:
                one(variant, n, mode, site)
    finally:
        b.remove_left()


if __name__ == "__main__":
    main()

"""Drill: random kill -9s of a loaded daemon must not make healthy jobs poison.

Starts a real daemon on a fresh store, enqueues healthy jobs of mixed lengths (``--max-
attempts`` high enough that budget never runs out in the drill) and one *culprit* that
kills its daemon each time it runs, then kills the daemon with SIGKILL ``--kills`` times at
random moments, restarting it each time. At the end every job must be final: healthy jobs
``succeeded`` (never ``dead``), the culprit ``dead`` as ``poison``. Prints one summary line;
exits 1 when a promise broke.

    python drills/kill9_poison.py --kills 45 --jobs 400
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _kit  # noqa: E402

#: A command that kills its daemon (named by the lease owner ``host:pid:tag`` in its
#: environment: its parent is the spawn helper, not the daemon).
KILL_DAEMON = 'owner=${JOBCTL_LEASE_OWNER#*:}; kill -9 "${owner%%:*}"'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=45)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-culprit", action="store_true")
    args, _ = ap.parse_known_args()
    rng = random.Random(args.seed)
    tmp = _kit.workdir("poison")
    d = _kit.Daemon(tmp, "--concurrency", "16", "--lease-ttl", "5", "--kill-grace", "1").start()
    with d.client() as c:
        jobs = [
            {
                "command": ["sleep", f"{rng.choice([0, 0, 0.05, 0.3, 1, 2, 4]):g}"],
                "cwd": "/",
                "max_attempts": 100,
                "backoff": {"base": 0, "cap": 0},
                "key": f"healthy-{i}",
            }
            for i in range(args.jobs)
        ]
        healthy = [j["id"] for j in c.enqueue_many(jobs)]
        culprit = None
        if not args.no_culprit:
            bad = {
                "command": ["sh", "-c", KILL_DAEMON],
                "cwd": "/",
                "max_attempts": 100,
                "backoff": {"base": 0, "cap": 0},
                "key": "culprit",
            }
            culprit = c.enqueue(bad)["id"]
    kills = crashes = 0
    while kills < args.kills:
        if d.alive():
            time.sleep(rng.uniform(0.1, 1.5))
            if d.alive():
                d.kill9()
                kills += 1
        assert d.proc is not None
        d.proc.wait()
        crashes += 1
        d.start()
    _kit.settled(d, 300)
    with d.client() as c:
        got = {i: c.get(i) for i in healthy}
        bad_job = c.get(culprit) if culprit is not None else None
    d.stop()
    poison = sum(1 for j in got.values() if j["dead_reason"] == "poison")
    dead = sum(1 for j in got.values() if j["status"] == "dead")
    done = sum(1 for j in got.values() if j["status"] == "succeeded")
    stuck = len(got) - done - dead
    lost = sum(
        1
        for j in got.values()
        if j["attempts"]
        and j["attempts"][-1]["outcome"] == "lease_expired"
        and j["status"] == "succeeded"
    )
    culprit_reason = None if bad_job is None else bad_job["dead_reason"]
    ok = (
        poison == 0 and dead == 0 and stuck == 0 and (bad_job is None or culprit_reason == "poison")
    )
    print(
        f"kill9_poison kills={kills} crashes={crashes} healthy={len(got)} succeeded={done} "
        f"dead={dead} poison={poison} stuck={stuck} culprit={culprit_reason} "
        f"reclaimed_attempts={sum(sum(a['outcome'] == 'lease_expired' for a in j['attempts']) for j in got.values())} "
        f"max_attempts_used={max(len(j['attempts']) for j in got.values())} ok={ok} dir={tmp}"
    )
    del lost
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

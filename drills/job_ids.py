"""Drill: a job id is never given twice, whatever was deleted and however the daemon died.

Issue 13, item 3: ids were ``max(id)+1``, so after ``jobctl dlq purge`` removed the newest
job, or ``jobctl prune`` removed every job, the next job got an old id again. Each round
here enqueues jobs (half fail, ``--max-attempts 1``, so they end dead), waits until they
are final, then deletes all of them (prune with a 1 s retention, then a DLQ purge), ends
the daemon (``kill -9`` on odd rounds, SIGTERM on even ones) and starts it again. Every
id answered must be new and above every id answered before. Prints one summary line;
exits 1 when an id came back.

    python drills/job_ids.py --rounds 6
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _kit  # noqa: E402

JOB = {"cwd": "/", "max_attempts": 1}


def one_round(d: _kit.Daemon, jobs: int, kill: bool) -> tuple[list[int], int, int]:
    """Enqueue, finish, delete everything, end the daemon, start it; ids, pruned, purged."""
    with d.client() as c:
        bodies = [JOB | {"command": ["true" if i % 2 else "false"]} for i in range(jobs)]
        ids = [j["id"] for j in c.enqueue_many(bodies)]
    _kit.settled(d, 120)
    time.sleep(1.1)  # past the 1 s retention
    with d.client() as c:
        pruned = int(c.request("POST", "/v1/prune", json_body={})["pruned"])
        purged = c.purge_dead(0)
        left = len(_kit.all_jobs(c))
    if left:
        raise RuntimeError(f"{left} jobs left after prune and purge")
    if kill:
        d.kill9()
    else:
        d.stop()
    d.start()
    return ids, pruned, purged


def run(rounds: int = 6, jobs: int = 20) -> _kit.Result:
    root = _kit.workdir("ids")
    config = root / "jobctl.toml"
    config.write_text('[retention]\nsucceeded = "1s"\ndead = "1s"\n')
    d = _kit.Daemon(root, "--config", str(config)).start()
    given: list[int] = []
    reused = not_above = pruned = purged = 0
    for n in range(rounds):
        ids, n_pruned, n_purged = one_round(d, jobs, kill=n % 2 == 0)
        reused += len(set(ids) & set(given))
        not_above += sum(1 for i in ids if given and i <= max(given))
        given += ids
        pruned, purged = pruned + n_pruned, purged + n_purged
    with d.client() as c:
        last = c.enqueue(JOB | {"command": ["true"]})["id"]
    d.stop()
    reused += last in given
    not_above += last <= max(given)
    r = _kit.Result("job_ids")
    r.figures = {
        "rounds": rounds,
        "ids_given": len(given) + 1,
        "pruned": pruned,
        "purged": purged,
        "reused": reused,
        "not_above_earlier": not_above,
        "last_id": last,
        "dir": root,
    }
    r.expect(reused == 0 and not_above == 0, "an id was given again")
    r.expect(pruned + purged == len(given), "not every job was deleted")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=20)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.rounds, args.jobs))


if __name__ == "__main__":
    sys.exit(main())

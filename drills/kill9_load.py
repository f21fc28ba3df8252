"""Drill: random kill -9s of a daemon under load lose nothing and fire nothing twice.

A daemon (concurrency 16, lease TTL 5 s, kill grace 1 s) on a fresh store runs cron
schedules in three zones and interval schedules, all with a command that writes to a
journal and holds a lock (a second live copy of one schedule's job cannot take it), while
a client enqueues jobs of mixed lengths without pause. The daemon is killed with SIGKILL
``--kills`` times at random moments and restarted; after each kill the store must pass
``PRAGMA integrity_check``. Then the schedules are paused (their cursor says which
occurrences were handled), every job is waited for, and:

- acknowledged jobs (answered 201): none lost (not in the store), none stuck (not
  final), none dead (the budget is high and no command fails);
- no two live copies of one job or of one schedule's jobs (``overlapping``);
- the Chronos checker (drills/_chronos.py): expected occurrences from each schedule's
  definition and zone, joined with what ran by key: 0 missed, 0 double-fired, 0 at an
  unexpected time.

    python drills/kill9_load.py --kills 90
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _chronos, _kit  # noqa: E402

SCHEDULES: list[dict[str, Any]] = [
    {"cron": "* * * * *", "tz": "UTC"},
    {"cron": "*/2 * * * *", "tz": "America/New_York"},
    {"cron": "* * * * *", "tz": "Australia/Lord_Howe"},
    {"every": 3.0},
    {"every": 7.0},
]
LENGTHS = [0, 0, 0.05, 0.3, 1, 2, 4]


class Loader(threading.Thread):
    """Enqueues small batches of journal jobs until stopped; remembers what was answered."""

    def __init__(
        self, d: _kit.Daemon, journal: Path, rng: random.Random, lengths: list[float]
    ) -> None:
        super().__init__(daemon=True)
        self.d, self.journal, self.rng, self.lengths = d, journal, rng, lengths
        self.acked: list[int] = []
        self.refused = 0
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            batch = [self._job(n + i) for i in range(8)]
            n += len(batch)
            try:
                with self.d.client() as c:
                    self.acked += [j["id"] for j in c.enqueue_many(batch)]
            except Exception:
                self.refused += len(batch)
            self.halt.wait(0.15)

    def _job(self, i: int) -> dict[str, Any]:
        return {
            "command": _kit.journal_command(self.journal, self.rng.choice(self.lengths)),
            "cwd": "/",
            "max_attempts": 100,
            "backoff": {"base": 0, "cap": 0},
            "key": f"load-{i}",
        }


def make_schedules(d: _kit.Daemon, journal: Path, lengths: list[float]) -> list[str]:
    ids = []
    with d.client() as c:
        for i, timing in enumerate(SCHEDULES):
            job = {
                "command": _kit.journal_command(
                    journal, lengths[i % len(lengths)], "$JOBCTL_SCHEDULE_ID"
                ),
                "cwd": "/",
                "max_attempts": 100,
                "backoff": {"base": 0, "cap": 0},
            }
            ids.append(c.create_schedule(timing | {"job": job})["id"])
    return ids


def kill_loop(d: _kit.Daemon, kills: int, rng: random.Random, gap: float) -> tuple[int, int]:
    """Kill and restart ``kills`` times; the store is checked while no daemon runs."""
    sound = 0
    for _ in range(kills):
        time.sleep(rng.uniform(0.1, gap))
        if d.alive():
            d.kill9()
        sound += _kit.integrity(d.db) == "ok"
        d.start()
    return kills, sound


def run(
    kills: int = 90, seed: int = 1, gap: float = 2.5, lengths: list[float] = LENGTHS
) -> _kit.Result:
    rng = random.Random(seed)
    root = _kit.workdir("kill9")
    journal = root / "journal"
    d = _kit.Daemon(root, "--concurrency", "16", "--lease-ttl", "5", "--kill-grace", "1").start()
    sids = make_schedules(d, journal, [min(x, max(lengths)) for x in (0.5, 2, 0.1, 4, 1)])
    loader = Loader(d, journal, rng, lengths)
    loader.start()
    killed, sound = kill_loop(d, kills, rng, gap)
    loader.halt.set()
    loader.join()
    with d.client() as c:
        for sid in sids:
            c.schedule_action(sid, "pause")
    is_settled = _kit.settled(d, 300)
    with d.client() as c:
        jobs = _kit.all_jobs(c)
        schedules = [c.schedule(sid) for sid in sids]
    stop = d.stop()
    sound += _kit.integrity(d.db) == "ok"
    return judge(root, jobs, schedules, loader, (killed, sound, stop, is_settled))


def judge(
    root: Path,
    jobs: list[dict[str, Any]],
    schedules: list[dict[str, Any]],
    loader: Loader,
    run_info: tuple[int, int, int, bool],
) -> _kit.Result:
    killed, sound, stop, is_settled = run_info
    journal = _kit.Journal.read(root / "journal")
    by_id = {j["id"]: j for j in jobs}
    acked = [by_id.get(i) for i in loader.acked]
    lost = sum(j is None for j in acked)
    stuck = sum(1 for j in acked if j is not None and j["status"] in ("scheduled", "running"))
    dead = sum(1 for j in acked if j is not None and j["status"] == "dead")
    poison = sum(1 for j in jobs if j["dead_reason"] == "poison")  # occurrences included
    check = _chronos.Check()
    for s in schedules:
        end = _chronos.parse_time(s["next_run_at"]) - timedelta(milliseconds=1)
        check.add(_chronos.check_schedule(s, jobs, journal.keys, end))
    r = _kit.Result("kill9_load")
    r.figures = {
        "kills": killed,
        "acknowledged": len(loader.acked),
        "refused_while_down": loader.refused,
        "lost": lost,
        "stuck": stuck,
        "dead": dead,
        "poison": poison,
        "overlapping": journal.overlaps,
        "double_fired": check.duplicates,
        "integrity_ok": f"{sound}/{killed + 1}",
        "reruns": sum(n - 1 for n in journal.starts.values()),
    } | {f"occ_{k}": v for k, v in check.figures().items() if k != "duplicates"}
    r.figures["dir"] = root
    r.expect(is_settled, "jobs still pending at the end")
    r.expect(lost == 0 and stuck == 0 and dead == 0, "acknowledged jobs lost, stuck or dead")
    r.expect(poison == 0, "healthy jobs dead as poison (no command here ever fails)")
    r.expect(journal.overlaps == 0, "two live copies of a job or of a schedule's jobs")
    r.expect(check.duplicates == 0, "an occurrence fired twice")
    r.expect(check.missed == 0 and check.unexpected == 0, "occurrences missed or unexpected")
    r.expect(sound == killed + 1, "integrity_check failed")
    r.expect(stop == 0, f"graceful stop exited {stop}")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=90)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gap", type=float, default=2.5, help="longest pause between kills (s)")
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.kills, args.seed, args.gap))


if __name__ == "__main__":
    sys.exit(main())

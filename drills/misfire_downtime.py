"""Drill: after downtime each misfire policy runs and skips exactly what docs/schedules.md says.

The daemon runs on a fake clock (libfaketime; skipped where it is absent). Schedules of
every policy (``skip``, ``once``, ``all``, ``all`` with ``--catch-up-limit 2``) on
``* * * * *``, ``0 * * * *`` (UTC) and ``--every 10m`` are created, then the daemon is
stopped, the clock moved forward by a random downtime (90 s to 5 h, ending 30 s past a
minute) and the daemon started again, ``--downs`` times. After each restart the
occurrences due at that moment are computed independently (drills/_chronos.py) and the
policy's documented outcome predicted from them: the jobs created and the skips recorded
must be exactly those.

    python drills/misfire_downtime.py --downs 10
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _chronos, _kit  # noqa: E402

GRACE = timedelta(seconds=60)
START = datetime(2027, 3, 14, 9, 29, 0, tzinfo=UTC)
TIMINGS: list[dict[str, Any]] = [
    {"cron": "* * * * *", "tz": "UTC"},
    {"cron": "0 * * * *", "tz": "UTC"},
    {"every": 600.0},
]
POLICIES: list[dict[str, Any]] = [
    {"misfire": "skip"},
    {"misfire": "once"},
    {"misfire": "all"},
    {"misfire": "all", "catch_up_limit": 2},
]


def predict(due: list[datetime], now: datetime, s: dict[str, Any]) -> tuple[set[datetime], int]:
    """The documented outcome: which occurrences run and how many are skipped."""
    if not due:
        return set(), 0
    if s["misfire"] == "skip":
        runs = {t for t in due if now - t <= GRACE}
    elif s["misfire"] == "once":
        runs = {max(due)} if any(now - t > GRACE for t in due) else set(due)
    else:
        runs = set(sorted(due)[-s["catch_up_limit"] :])
    return runs, len(due) - len(runs)


def fake_start(d: _kit.Daemon, when: datetime) -> datetime:
    """Start the daemon with its clock at ``when``; the daemon's own now once ready."""
    d.env = _kit.faketime_env(when.strftime("@%Y-%m-%d %H:%M:%S"), monotonic=True)
    d.start()
    with d.client() as c:
        return _chronos.parse_time(c.status()["now"])


def handled(d: _kit.Daemon, sids: list[str], now: datetime) -> bool:
    """Whether every schedule's cursor is past ``now`` (its due occurrences were handled)."""
    with d.client() as c:
        return all(_chronos.parse_time(c.schedule(sid)["next_run_at"]) > now for sid in sids)


def cycle(d: _kit.Daemon, when: datetime, sids: list[str]) -> tuple[int, int, list[str]]:
    """One downtime: stop, move the clock to ``when``, start, compare with the prediction."""
    with d.client() as c:
        before = {sid: c.schedule(sid) for sid in sids}
    d.stop()
    now = fake_start(d, when)
    _kit.until(lambda: handled(d, sids, now), 60)  # the materializer's first pass is done
    _kit.settled(d, 60)
    wrong: list[str] = []
    runs = skips = 0
    with d.client() as c:
        jobs = _kit.all_jobs(c)
        for sid in sids:
            b, a = before[sid], c.schedule(sid)
            cursor = _chronos.parse_time(b["next_run_at"])
            due = _chronos.expected(b, cursor - timedelta(milliseconds=1), now)
            want, skipped = predict(due, now, b)
            got = {
                _chronos.parse_time(j["scheduled_for"])
                for j in jobs
                if j["schedule_id"] == sid
                and cursor <= _chronos.parse_time(j["scheduled_for"]) <= now
            }
            got_skips = a["misfire_skips"] - b["misfire_skips"]
            runs, skips = runs + len(got), skips + got_skips
            if got != want or got_skips != skipped:
                wrong.append(
                    f"{b['cron'] or b['every']}/{b['misfire']}: ran {len(got)} skipped "
                    f"{got_skips}, documented {len(want)} and {skipped}"
                )
    return runs, skips, wrong


def run(downs: int = 10, seed: int = 1, timings: list[dict[str, Any]] = TIMINGS) -> _kit.Result:
    r = _kit.Result("misfire_downtime")
    if _kit.faketime_lib() is None:
        r.skipped = "libfaketime is not installed (apt-get install faketime)"
        return r
    rng = random.Random(seed)
    root = _kit.workdir("misfire")
    d = _kit.Daemon(root)
    fake_start(d, START)
    job = {"command": ["true"], "cwd": "/"}
    with d.client() as c:
        sids = [
            c.create_schedule(t | p | {"overlap": "allow", "job": job})["id"]
            for t in timings
            for p in POLICIES
        ]
    _kit.settled(d, 30)
    wrong: list[str] = []
    when, runs, skips = START, 0, 0
    for _ in range(downs):
        when = when + timedelta(minutes=rng.randint(2, 300))
        n_runs, n_skips, n_wrong = cycle(d, when.replace(second=30), sids)
        runs, skips, wrong = runs + n_runs, skips + n_skips, wrong + n_wrong
    d.stop()
    r.figures = {
        "downtimes": downs,
        "schedules": len(sids),
        "fake_hours": f"{(when - START).total_seconds() / 3600:.1f}",
        "runs": runs,
        "skipped": skips,
        "wrong": len(wrong),
        "dir": root,
    }
    for w in wrong[:3]:
        r.expect(False, w)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--downs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.downs, args.seed))


if __name__ == "__main__":
    sys.exit(main())

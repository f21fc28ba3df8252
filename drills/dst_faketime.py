"""Drill: DST changes under libfaketime fire exactly as documented.

DST: for each of the 2027 transitions of America/New_York, Europe/London,
Australia/Sydney and Australia/Lord_Howe (spring forward and fall back), a daemon runs on a
fake clock from 50 minutes before the change (at real speed until the daemon is up and
the schedules exist, then ``--speed`` times faster) to 80 minutes after, with the same
set of fixed-time and wildcard schedules in the zone (``--misfire all``, so that a run a
loaded machine makes late still runs under its own key; the latest lateness is shown). The
Chronos checker (drills/_chronos.py) computes what each should fire from the contract in
docs/schedules.md, without jobctl's evaluator: 0 missed, 0 double-fired, 0 unexpected.

Clock jumps are drills/clock_jumps.py.

Skipped (exit 0, "skipped: ...") where libfaketime is not installed.

    python drills/dst_faketime.py --speed 60
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _chronos, _kit  # noqa: E402
from jobctl.client import Client  # noqa: E402
from jobctl.errors import DaemonUnavailable  # noqa: E402

T = TypeVar("T")

#: zone -> the UTC instants its clocks change in 2027.
TRANSITIONS = {
    "America/New_York": ["2027-03-14T07:00:00Z", "2027-11-07T06:00:00Z"],
    "Europe/London": ["2027-03-28T01:00:00Z", "2027-10-31T01:00:00Z"],
    "Australia/Sydney": ["2027-04-03T16:00:00Z", "2027-10-02T16:00:00Z"],
    "Australia/Lord_Howe": ["2027-04-03T15:00:00Z", "2027-10-02T15:30:00Z"],
}
CRONS = [
    "*/15 * * * *",
    "0 * * * *",
    "0 0-23 * * *",
    "30 1 * * *",
    "45 1 * * *",
    "30 2 * * *",
    "15 2 * * *",
    "0,30 2 * * *",
]
#: Minutes of fake time before and after each change.
WINDOW = (50, 80)
#: Fake minutes after the window for every occurrence up to its end to be made and run.
TAIL = 10


def spec(when: datetime, speed: float) -> str:
    return when.strftime("@%Y-%m-%d %H:%M:%S") + (f" x{speed:g}" if speed != 1 else "")


def transition(
    zone: str, change: datetime, speed: float, window: tuple[int, int], tail: int = TAIL
) -> tuple[_chronos.Check, str, float]:
    """One DST change: a fast fake clock through it, then the checker."""
    before, after = (timedelta(minutes=m) for m in window)
    root = _kit.workdir("dst")
    spec_file, journal = root / "faketime", root / "journal"
    spec_file.write_text(spec(change - before, 1))  # real speed while the daemon starts
    ttl = str(max(30, int(speed * 5)))  # five real seconds of lease, whatever the speed
    d = _kit.Daemon(root, "--lease-ttl", ttl, env=_kit.faketime_env(spec_file, monotonic=True))
    d.start()
    job = {"command": _kit.journal_command(journal, 0), "cwd": "/"}
    with d.client() as c:
        sids = [
            c.create_schedule({"cron": e, "tz": zone, "misfire": "all", "job": job})["id"]
            for e in CRONS
        ]
    spec_file.write_text(spec(_daemon_now(d) + timedelta(seconds=2), speed))  # now fast
    end = change + after
    # The checker's window ends at ``end``; ``tail`` fake minutes more let every occurrence up
    # to it be made and run. The daemon stays fast: its timeouts are in fake seconds, so
    # each read gets a connection of its own and a second try.
    wait = (before + after).total_seconds() / speed + 60
    _kit.until(lambda: _daemon_now(d) > end + timedelta(minutes=tail), wait, 0.5)
    jobs = _read(d, _kit.all_jobs)
    schedules = [_read(d, partial(_schedule, sid=sid)) for sid in sids]
    d.stop()
    check = _chronos.Check()
    keys = _kit.Journal.read(journal).keys
    for s in schedules:
        check.add(_chronos.check_schedule(s, jobs, keys, end))
    late = max((_late(j) for j in jobs), default=0.0)
    return check, f"{zone}@{change:%m-%d}", late


def _schedule(c: Client, sid: str) -> Any:
    return c.schedule(sid)


def _read(d: _kit.Daemon, fn: Callable[[Client], T]) -> T:
    for _ in range(4):
        try:
            with d.client() as c:
                return fn(c)
        except DaemonUnavailable:
            continue
    with d.client() as c:
        return fn(c)


def _daemon_now(d: _kit.Daemon) -> datetime:
    try:
        with d.client() as c:
            return _chronos.parse_time(c.status()["now"])
    except Exception:
        return datetime.min.replace(tzinfo=UTC)


def _late(job: dict[str, Any]) -> float:
    made = _chronos.parse_time(job["created_at"])
    return (made - _chronos.parse_time(job["scheduled_for"])).total_seconds()


def run(
    zones: dict[str, list[str]] = TRANSITIONS,
    speed: float = 60,
    parallel: int = 4,
    window: tuple[int, int] = WINDOW,
    tail: int = TAIL,
) -> _kit.Result:
    r = _kit.Result("dst_faketime")
    if _kit.faketime_lib() is None:
        r.skipped = "libfaketime is not installed (apt-get install faketime)"
        return r
    todo = [(z, _chronos.parse_time(t)) for z, ts in zones.items() for t in ts]
    with ThreadPoolExecutor(parallel) as pool:
        done = list(pool.map(lambda zt: transition(zt[0], zt[1], speed, window, tail), todo))
    total = _chronos.Check()
    for check, where, _ in done:
        total.add(check)
        r.expect(
            check.missed == 0 and check.duplicates == 0 and check.unexpected == 0,
            f"{where}: {check.figures()}",
        )
    r.figures = {
        "transitions": len(todo),
        "speed": f"x{speed:g}",
        "schedules": len(todo) * len(CRONS),
    }
    r.figures |= {f"occ_{k}": v for k, v in total.figures().items()}
    r.figures["late_max_s"] = f"{max(late for _, _, late in done):.0f}"
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=float, default=60)
    ap.add_argument("--parallel", type=int, default=4)
    args, _ = ap.parse_known_args()
    return _kit.finish(run(speed=args.speed, parallel=args.parallel))


if __name__ == "__main__":
    sys.exit(main())

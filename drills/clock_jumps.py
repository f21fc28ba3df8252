"""Drill: the host clock stepped back and forward while a daemon runs (libfaketime).

The daemon's wall clock is stepped while CLOCK_MONOTONIC runs on, as when NTP steps a
host's clock or a VM resumes: at real speed, a ``* * * * *`` schedule fires at 12:00, a
long job starts, the clock goes back ``--back`` seconds and comes round to 12:00 again,
then it is stepped forward to 12:10:30. Then:

- nothing fired twice (the 12:00 occurrence is not run again when 12:00 comes round a
  second time), and the checker (drills/_chronos.py) finds 0 missed and 0 unexpected:
  12:01-12:09 are recorded as misfire skips, 12:10 runs (once, the default policy);
- the forward step is noticed within 30 s (the daemon's longest nap), not after the
  wall-clock sleep it was in when the clock moved;
- the long job finishes on its first attempt: a clock step does not cost it its lease.

Skipped (exit 0, "skipped: ...") where libfaketime is not installed.

    python drills/clock_jumps.py
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drills import _chronos, _kit  # noqa: E402

NOON = datetime(2027, 1, 10, 12, 0, tzinfo=UTC)


def step(spec: Path, when: datetime) -> None:
    """Step the fake clock to ``when`` (libfaketime reads the file again within a second)."""
    spec.write_text(when.strftime("@%Y-%m-%d %H:%M:%S\n"))


def now_of(d: _kit.Daemon) -> datetime:
    with d.client() as c:
        return _chronos.parse_time(c.status()["now"])


def run(back: float = 60, forward: bool = True, long_job: float = 8) -> _kit.Result:
    r = _kit.Result("clock_jumps")
    if _kit.faketime_lib() is None:
        r.skipped = "libfaketime is not installed (apt-get install faketime)"
        return r
    root = _kit.workdir("jumps")
    spec, journal = root / "faketime", root / "journal"
    step(spec, NOON - timedelta(minutes=5))
    d = _kit.Daemon(root, "--lease-ttl", "5", env=_kit.faketime_env(spec, monotonic=False))
    d.start()
    step(spec, NOON - timedelta(seconds=3))  # however long the start took
    _kit.until(lambda: now_of(d) >= NOON - timedelta(seconds=3), 10)
    with d.client() as c:
        job = {"command": _kit.journal_command(journal, 0), "cwd": "/"}
        sid = c.create_schedule({"cron": "* * * * *", "tz": "UTC", "job": job})["id"]
    fired = _kit.until(lambda: f"{sid}@2027-01-10T12:00:00Z" in _kit.Journal.read(journal).keys, 60)
    with d.client() as c:
        body = {"command": _kit.journal_command(journal, long_job), "cwd": "/", "max_attempts": 1}
        long_id = c.enqueue(body)["id"]
    _kit.until(lambda: long_id in _kit.Journal.read(journal).starts, 30)
    step(spec, NOON - timedelta(seconds=back))
    went_back = _kit.until(lambda: now_of(d) < NOON, 10)
    again = _kit.until(lambda: now_of(d) > NOON + timedelta(seconds=5), back + 30)  # 12:00 again
    notice_s = None
    if forward:
        step(spec, NOON + timedelta(minutes=10, seconds=30))
        began = time.monotonic()
        key = f"{sid}@2027-01-10T12:10:00Z"
        noticed = _kit.until(lambda: key in _kit.Journal.read(journal).keys, 75)
        notice_s = time.monotonic() - began
        r.expect(noticed, f"the forward step was not noticed within {notice_s:.0f}s")
    with d.client() as c:
        c.schedule_action(sid, "pause")
    _kit.settled(d, 60)
    with d.client() as c:
        jobs = _kit.all_jobs(c)
        sched = c.schedule(sid)
        long = c.get(long_id)
    d.stop()
    found = _kit.Journal.read(journal)
    cursor = _chronos.parse_time(sched["next_run_at"]) - timedelta(milliseconds=1)
    check = _chronos.check_schedule(sched, jobs, found.keys, cursor)
    r.figures = {"back_s": f"{back:g}", "forward_min": 10.5 if forward else 0}
    r.figures["notice_s"] = "-" if notice_s is None else f"{notice_s:.1f}"
    r.figures |= {f"occ_{k}": v for k, v in check.figures().items()}
    r.figures |= {"long_job": long["status"], "long_attempts": len(long["attempts"]), "dir": root}
    r.expect(fired and went_back and again, "the clock did not move as the drill needs")
    r.expect(check.duplicates == 0, "an occurrence fired twice")
    r.expect(check.missed == 0 and check.unexpected == 0, "occurrences missed or unexpected")
    r.expect(
        long["status"] == "succeeded" and len(long["attempts"]) == 1 and found.overlaps == 0,
        "the running job lost its first attempt to a clock step",
    )
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--back", type=float, default=60, help="seconds the clock goes back")
    args, _ = ap.parse_known_args()
    return _kit.finish(run(args.back))


if __name__ == "__main__":
    sys.exit(main())

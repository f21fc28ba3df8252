"""The schedules ``bench_schedules`` creates: a mix of cron shapes over the report's zones,
each with exactly one occurrence in a window, and the helpers that store, copy and walk
them."""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from _common import log
from schedules_report import ZONES

QUEUE = "sched-bench"


def cron_for(local: dt.datetime, kind: int) -> str:
    """A cron expression of ``kind`` that fires at the wall time ``local`` (whole minutes)."""
    m, h, d, mon = local.minute, local.hour, local.day, local.month
    dow = local.isoweekday() % 7
    exprs = [
        f"{m} * * * *",  # hourly
        f"{m} {h} * * *",  # daily
        f"{m} {h} * * {'1-5' if 1 <= dow <= 5 else '0,6'}",  # weekdays / weekends
        f"{m} {h} * * {dow}",  # weekly
        f"{m} {h} {d} * *",  # monthly
        f"{m} {h},{(h + 12) % 24} * * *",  # twice a day
        f"{m} {h} {d} {mon} *",  # yearly
        f"{m} {h} 1-{max(d, 15)} * *",  # first half of the month
    ]
    if m % 15 == 0:
        exprs += ["*/15 * * * *", f"{m} */{3 if h % 3 == 0 else 1} * * *"]
    if m % 5 == 0:
        exprs += ["*/5 * * * *"]
    return exprs[kind % len(exprs)]


def make_specs(n: int, t0: dt.datetime, window_min: int, seed: int = 7) -> list[Any]:
    """``n`` schedules whose first occurrence after ``t0`` is in (t0, t0 + window_min]
    and whose second is after that, over a mix of zones and cron shapes."""
    from jobctl.domain.models import JobTemplate
    from jobctl.domain.schedule import Policy, ScheduleSpec, Timing

    rng = random.Random(seed)
    uid = os.geteuid()
    template = JobTemplate(("true",), queue=QUEUE)
    zones = {z: ZoneInfo(z) for z in ZONES}
    specs = []
    for _ in range(n):
        zone = rng.choice(ZONES)
        at = t0 + dt.timedelta(minutes=rng.randint(1, window_min))
        cron = cron_for(at.astimezone(zones[zone]), rng.randrange(12))
        specs.append(ScheduleSpec(Timing(zone, cron=cron), Policy(), template, uid))
    return specs


def create_all(store: Any, specs: list[Any], chunk: int = 1000) -> float:
    """Create the schedules through ``create_schedules``, lists of ``chunk`` (one
    transaction each, as ``POST /v1/schedules`` with a list does). Returns schedules/s."""
    t = time.perf_counter()
    for start in range(0, len(specs), chunk):
        got = store.create_schedules(specs[start : start + chunk])
        bad = [a for a in got if isinstance(a, Exception)]
        if bad:
            raise RuntimeError(f"create_schedules refused {len(bad)}: {bad[0]}")
        done = start + len(got)
        if done % 100_000 == 0:
            log(f"  created {done:,} schedules ({done / (time.perf_counter() - t):,.0f}/s)")
    return len(specs) / (time.perf_counter() - t)


def api_body(spec: Any) -> dict[str, Any]:
    """The ``POST /v1/schedules`` object of a spec made by :func:`make_specs`."""
    return {
        "cron": spec.timing.cron,
        "tz": spec.timing.tz,
        "job": {"command": list(spec.template.command), "queue": QUEUE, "cwd": "/"},
    }


def copy_db(src: Path, dst: Path) -> None:
    """Copy a closed SQLite database (its WAL was checkpointed when it closed)."""
    for suffix in ("", "-wal"):
        if Path(str(src) + suffix).exists():
            shutil.copyfile(str(src) + suffix, str(dst) + suffix)


def floor_minute(t: dt.datetime) -> dt.datetime:
    return t.replace(second=0, microsecond=0)


def walk_schedules(store: Any, page: int = 10_000) -> Iterator[Any]:
    """Every schedule of the store, a keyset page at a time."""
    after = None
    while got := store.list_schedules(False, page, after):
        yield from got
        after = got[-1].id

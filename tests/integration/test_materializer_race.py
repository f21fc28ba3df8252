"""Two materializer processes on one database never create a job twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from jobctl.store.sqlite import SqliteStore
from tests.integration.conftest import wait_until

START = datetime(2027, 3, 1, tzinfo=UTC)
NOW = START + timedelta(hours=3)

WORKER = textwrap.dedent("""
    import json, sys, time
    from datetime import datetime
    from pathlib import Path
    from jobctl.domain.clock import FakeClock
    from jobctl.store.sqlite import SqliteStore

    db, go, now = sys.argv[1], Path(sys.argv[2]), datetime.fromisoformat(sys.argv[3])
    store = SqliteStore(db, FakeClock(now), lock=False)  # the race is the point
    Path(sys.argv[4]).touch()
    while not go.exists():  # start together
        time.sleep(0.001)
    created, passes = [], 0
    while True:
        done = store.materialize(7)
        passes += 1
        created += [key for key in ((s, n.isoformat()) for s, _, n in done.created)]
        if not done.schedules:
            break
    store.close()
    print(json.dumps({"created": created, "passes": passes}))
""")


def test_two_processes_materialize_each_occurrence_once(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    store = SqliteStore(db, FakeClock(START), lock=False)
    timing = [
        Timing("UTC", cron="*/10 * * * *"),
        Timing("UTC", cron="0 * * * *"),
        Timing("UTC", every=900.0, anchor=START),
    ]
    policy = Policy(misfire=Misfire.ALL, catch_up_limit=1000, overlap=Overlap.ALLOW)
    ids = [
        store.create_schedule(ScheduleSpec(timing[i % 3], policy, JobTemplate(("true",)), 0)).id
        for i in range(60)
    ]
    store.close()
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(db), str(go), NOW.isoformat(), str(r)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    wait_until(lambda: all(r.exists() for r in ready), what="both workers to open the store")
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    created = [tuple(c) for r in results for c in r["created"]]
    assert len(created) == len(set(created)), "an occurrence was materialized twice"
    per_kind = {0: 18, 1: 3, 2: 12}  # occurrences in (START, NOW]: */10, hourly, every 15m
    assert len(created) == sum(per_kind[i % 3] for i in range(60))

    check = SqliteStore(db, FakeClock(NOW), lock=False)
    try:
        jobs = check.list_jobs(None, None, 100_000, None)
        assert len(jobs) == len(created) == len({j.key for j in jobs})
        for sid in ids:
            assert check.get_schedule(sid).next_run_at > NOW
    finally:
        check.close()

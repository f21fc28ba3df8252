"""Short forms of the failure drills in drills/ (issue 13): the same code as ``./dev drill``
with a few kills and minutes of fake time, so a broken promise fails the suite too.

Each drill returns a Result whose summary line is the assertion message; a drill whose
tool is missing (libfaketime, a tmpfs for the full disk) reports itself skipped.
"""

from __future__ import annotations

import pytest

from drills import (
    _kit,
    clock_jumps,
    corrupt_store,
    dst_faketime,
    job_ids,
    kill9_load,
    misfire_downtime,
    resources,
    second_daemon,
    sigterm_long,
)

#: Real daemons: a start costs seconds on a loaded machine, and each drill starts several.
pytestmark = [pytest.mark.drill, pytest.mark.timeout(300)]


def held(result: _kit.Result) -> None:
    if result.skipped is not None:
        pytest.skip(result.line())
    assert result.ok, result.line()


def test_kill9_under_load_loses_nothing_and_fires_nothing_twice() -> None:
    held(kill9_load.run(kills=2, gap=0.5, lengths=[0, 0.05, 0.3]))


def test_sigterm_with_long_jobs_costs_no_budget_and_leaves_no_process() -> None:
    held(sigterm_long.run(jobs=2))


def test_misfire_after_downtime_counts_as_documented() -> None:
    held(misfire_downtime.run(downs=1, timings=misfire_downtime.TIMINGS[1:]))


def test_dst_fall_back_on_lord_howe_fires_as_documented() -> None:
    # 01:30-02:00 repeats (15:00-15:30Z): the fixed times of the first pass must not fire
    # again, the wildcards must, 02:00 once; fake time costs CPU, so just that and no more
    one = {"Australia/Lord_Howe": ["2027-04-03T15:00:00Z"]}
    held(dst_faketime.run(one, speed=200, window=(3, 31), tail=4))


def test_a_clock_stepped_back_fires_nothing_twice() -> None:
    # back to 11:59:56 after 12:00 fired: 12:00 comes round again and must not fire twice
    # (4 s, not less: a poll of the daemon's clock must see it before 12:00 on a busy host)
    held(clock_jumps.run(back=4, forward=False, long_job=3))


def test_a_second_daemon_is_refused_by_every_spelling() -> None:
    # every spelling, with the first daemon's jobs checked, is the full form; the suite has
    # each spelling on its own in tests/integration/test_db_lock.py
    held(second_daemon.run(jobs=2, only=["symlinked_dir"]))


def test_corrupt_stores_are_refused_and_degrade_a_running_daemon() -> None:
    # tests/integration/test_corrupt_store.py has every kind at start on its own
    held(corrupt_store.run(jobs=500, copies=0, kinds=["truncated"]))


def test_out_of_descriptors_and_out_of_disk_lose_nothing() -> None:
    held(resources.run(nofile=64, bursts=1, size_mib=16, full_for=0.2, acks=20))


def test_job_ids_are_never_given_twice() -> None:
    # one round: every job deleted, the daemon killed with kill -9 and started again (ids
    # were max(id) + 1, so the next job got id 1 again)
    held(job_ids.run(rounds=1, jobs=4))

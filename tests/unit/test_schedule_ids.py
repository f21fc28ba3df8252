"""Schedule ids are minted in increasing order (store/schedule_ids.py says why)."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Policy, Schedule, ScheduleSpec, Timing
from jobctl.store.schedule_ids import COUNTER_BITS, IdMint
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2027, 3, 14, 6, 0, tzinfo=UTC)


def test_ids_keep_their_shape_and_increase_within_and_across_seconds() -> None:
    mint = IdMint()
    ids = [mint.next(T0) for _ in range(5)] + [mint.next(T0 + timedelta(seconds=1))]
    assert all(re.fullmatch(r"sch-[0-9a-f]{12}", i) for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    values = [int(i[4:], 16) for i in ids]
    assert values[1:5] == [values[0] + k for k in range(1, 5)]
    assert values[5] >> COUNTER_BITS == (values[0] >> COUNTER_BITS) + 1


def test_a_clock_that_steps_back_never_repeats_an_id() -> None:
    mint = IdMint()
    later = mint.next(T0 + timedelta(hours=1))
    assert mint.next(T0) > later  # continues from the last id, not from the past second


def test_a_second_whose_counter_runs_out_borrows_from_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("jobctl.store.schedule_ids.secrets.randbelow", lambda n: n - 1)
    mint = IdMint()
    first = int(mint.next(T0)[4:], 16)
    count = (1 << COUNTER_BITS) - (first % (1 << COUNTER_BITS))
    seen = [int(mint.next(T0)[4:], 16) for _ in range(count + 2)]
    assert seen == list(range(first + 1, first + count + 3))  # past the second: still +1


def _spec(n: int) -> ScheduleSpec:
    return ScheduleSpec(Timing("UTC", cron="0 * * * *"), Policy(), JobTemplate((f"job{n}",)), 7)


def test_a_restart_within_the_same_second_draws_past_its_predecessors_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new process (a new mint) in the second the previous one minted in: its first ids
    are taken; the batch falls back to one insert each and every item is still created."""
    from jobctl.store import schedules

    monkeypatch.setattr("jobctl.store.schedule_ids.secrets.randbelow", lambda n: 0)
    store = SqliteStore(tmp_path / "j.db", FakeClock(T0))
    try:
        monkeypatch.setattr(schedules, "MINT", IdMint())
        before = store.create_schedules([_spec(i) for i in range(3)])
        monkeypatch.setattr(schedules, "MINT", IdMint())  # "restarted"
        after = store.create_schedules([_spec(i) for i in range(3, 6)])
        assert all(isinstance(s, Schedule) for s in before + after)
        ids = [s.id for s in before + after if isinstance(s, Schedule)]
        assert len(set(ids)) == 6
        assert {s.id for s in store.list_schedules()} == set(ids)
    finally:
        store.close()


def test_the_batch_statement_stores_the_rows_one_insert_stores(tmp_path: Path) -> None:
    """insert_schedule_defs (JSON rows, one statement) against insert_schedule_def (named
    parameters, one row): the same columns in both tables for the same schedules."""
    clock = FakeClock(T0)
    anchor = T0 - timedelta(minutes=7, milliseconds=250)
    template = JobTemplate(
        ("backup", "--to", "/srv/b ü"), queue="q", priority=3, timeout=90.5,
        env=(("A", "1"), ("B", "x y")), cwd="/srv", retry_on=(2, 3), no_retry_on=(),
    )  # fmt: skip
    specs = [
        ScheduleSpec(Timing("Asia/Tokyo", cron="H 6 * * 1-5"), Policy(jitter=1.5), template, 7),
        ScheduleSpec(Timing("UTC", every=90.5, anchor=anchor), Policy(), template, 8, "every"),
        ScheduleSpec(Timing("Europe/Berlin", cron="*/5 * * * *"), Policy(), template, 9, "b"),
    ]
    paths = {"batch": tmp_path / "batch.db", "single": tmp_path / "single.db"}
    made: dict[str, list[str]] = {}
    for how, path in paths.items():
        store = SqliteStore(path, clock)
        if how == "batch":
            got = store.create_schedules(specs)
        else:
            got = [store.create_schedule(s) for s in specs]
        made[how] = [s.id for s in got if isinstance(s, Schedule)]
        store.close()
    assert len(made["batch"]) == len(made["single"]) == 3
    stored = {how: _rows(path, made[how]) for how, path in paths.items()}
    assert stored["batch"] == stored["single"]


def _rows(path: Path, ids: list[str]) -> list[tuple[tuple[str, object], ...]]:
    """Each schedule's stored columns, its id (and the H it hashes) left out."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    out = []
    for sid in ids:
        d = dict(conn.execute("SELECT * FROM schedule_defs WHERE id = ?", (sid,)).fetchone())
        c = dict(conn.execute("SELECT * FROM schedule_cursors WHERE id = ?", (sid,)).fetchone())
        if d["cron"] and d["cron"].startswith("H"):
            c.pop("next_run_at")  # hashed from the id, which differs
        out.append(tuple(sorted((k, v) for k, v in (d | c).items() if k != "id")))
    conn.close()
    return out

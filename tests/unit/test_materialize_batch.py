"""The batched materialization of the SQLite store: compare-and-set and the plan memo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.domain import schedule as sched
from jobctl.domain.clock import FakeClock
from jobctl.domain.cron import next_fire, parse_cron
from jobctl.domain.models import Backoff, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.errors import Conflict, KeyConflict
from jobctl.store.base import Inserted
from jobctl.store.inserts import Prepared, insert_fresh, insert_prepared
from jobctl.store.jobrow import row_tail
from jobctl.store.materialize import RowMaker, materialize_tx
from jobctl.store.rows import to_ms
from jobctl.store.schedconn import SqliteSchedConn
from jobctl.store.sqlite import SqliteStore, connect

T0 = datetime(2027, 3, 13, 12, 0, tzinfo=UTC)
TEMPLATE = JobTemplate(command=("true",), max_attempts=1)


def _no_specs(conn: object, specs: object) -> list[Inserted]:
    raise AssertionError("a materializer inserts occurrences, not specs")


def test_a_cursor_moved_by_someone_else_fails_the_whole_batch(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    store = SqliteStore(tmp_path / "m.db", clock)
    spec = ScheduleSpec(Timing("UTC", cron="0 * * * *"), Policy(), TEMPLATE, 1000)
    a, b = store.create_schedule(spec), store.create_schedule(spec)
    store.close()
    conn = connect(str(tmp_path / "m.db"))
    conn.execute("BEGIN IMMEDIATE")
    # Another materializer moved b's cursor after this one read it: simulated by a
    # trigger that moves it as soon as the batch inserts its first job.
    conn.execute(
        "CREATE TEMP TRIGGER race AFTER INSERT ON jobs BEGIN "
        f"UPDATE schedule_cursors SET next_run_at = next_run_at + 1 WHERE id = '{b.id}'; END"
    )
    with pytest.raises(Conflict, match="1 of 2 schedules"):
        materialize_tx(SqliteSchedConn(conn, _no_specs), T0 + timedelta(hours=1), 100)
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert {r[0] for r in conn.execute("SELECT next_run_at FROM schedules")} == {
        int((T0 + timedelta(hours=1)).timestamp() * 1000)
    }
    conn.close()
    assert a.id != b.id


@pytest.mark.parametrize(
    ("expr", "zone", "after"),
    [
        ("30 2 * * *", "America/New_York", datetime(2027, 3, 13, 12, tzinfo=UTC)),
        ("*/30 * * * *", "America/New_York", datetime(2027, 11, 7, 5, 15, tzinfo=UTC)),
        ("30 1 * * *", "Europe/London", datetime(2027, 10, 30, 12, tzinfo=UTC)),
        ("0 3 * * *", "Pacific/Chatham", datetime(2027, 9, 25, 0, tzinfo=UTC)),
    ],
)
def test_memoized_fire_times_equal_the_evaluator(expr: str, zone: str, after: datetime) -> None:
    from zoneinfo import ZoneInfo

    timing = Timing(zone, cron=expr)
    expected, t = [], after
    for _ in range(6):
        t = next_fire(parse_cron(expr), ZoneInfo(zone), t)
        expected.append(t)
    assert timing.fires(after, 6) == expected
    assert timing.fires(after, 6) == expected  # second time from the memo
    # the same instant in another zone is the same question (and the same answer)
    assert timing.next_after(after.astimezone(ZoneInfo("Asia/Tokyo"))) == expected[0]


@pytest.mark.parametrize(
    ("expr", "zone", "minute"),
    [
        ("*/5 * * * *", "UTC", datetime(2027, 3, 13, 12, 5, tzinfo=UTC)),
        ("* * * * *", "Asia/Tokyo", datetime(2027, 3, 13, 12, 0, tzinfo=UTC)),
        ("30 2 * * *", "America/New_York", datetime(2027, 3, 14, 6, 59, tzinfo=UTC)),
        # Monrovia was UTC-0:44:30 until 1972: its whole minutes are at :30 in UTC, so the
        # first fire after the start of a UTC minute can lie inside that minute
        ("* * * * *", "Africa/Monrovia", datetime(1970, 6, 1, 12, 0, tzinfo=UTC)),
        ("16 11 * * *", "Africa/Monrovia", datetime(1970, 6, 1, 12, 0, tzinfo=UTC)),
    ],
)
def test_the_fire_memo_by_minute_answers_every_instant_of_it(
    expr: str, zone: str, minute: datetime
) -> None:
    """The memo is keyed by the start of ``after``'s minute (a batch asks after its own
    ``now``): for every instant of the minute the answer is the evaluator's."""
    from zoneinfo import ZoneInfo

    timing = Timing(zone, cron=expr)
    for offset in (0, 0.000001, 1, 29.999, 30, 30.5, 45, 59.999999):
        after = minute + timedelta(seconds=offset)
        assert timing.next_after(after) == next_fire(parse_cron(expr), ZoneInfo(zone), after)


def test_the_fire_memo_is_bounded() -> None:
    info = sched._next_cron_at.cache_info()
    assert info.maxsize == sched.FIRE_CACHE_SIZE


@pytest.mark.parametrize(
    "template",
    [
        TEMPLATE,
        JobTemplate(
            command=("sh", "-c", 'echo "é" $X'),
            queue="reports",
            priority=-3,
            max_attempts=7,
            timeout=12.5,
            backoff=Backoff(0.5, 90),
            env=(("X", "1"), ("A", "z")),
            cwd="/tmp",
            retry_on=(1, 75),
            no_retry_on=(3,),
        ),
    ],
)
def test_prepared_occurrence_rows_equal_the_rows_of_their_spec(template: JobTemplate) -> None:
    """The materializer's shortcut stores exactly what insert_jobs would for the spec."""
    maker = RowMaker(template, 1234)
    nominal = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)
    run_at = nominal + timedelta(milliseconds=4321)
    now_ms = to_ms(nominal) + 60_000
    key = sched.occurrence_key("sch-00ab", nominal)
    spec = template.to_spec(run_at, key, 1234, "sch-00ab", nominal)
    item = maker.item("sch-00ab", maker.fingerprint("sch-00ab"), nominal, run_at, now_ms)
    assert item == (key, spec.fingerprint(), row_tail(spec, now_ms))
    assert maker.fingerprint("sch-00ac") != maker.fingerprint("sch-00ab")


def _prepared(template: JobTemplate, sid: str, nominal: datetime) -> Prepared:
    maker = RowMaker(template, 1000)
    return maker.item(sid, maker.fingerprint(sid), nominal, nominal, to_ms(T0))


def test_fresh_insert_falls_back_to_the_checked_way_when_a_key_exists(tmp_path: Path) -> None:
    """A client may have taken an occurrence's key: the outcome is insert_prepared's."""
    store = SqliteStore(tmp_path / "m.db", FakeClock(T0))
    store.close()
    conn = connect(str(tmp_path / "m.db"))
    nominal = T0 + timedelta(hours=1)
    items = [_prepared(TEMPLATE, sid, nominal) for sid in ("sch-a", "sch-b", "sch-c")]
    conn.execute("BEGIN IMMEDIATE")
    [taken] = insert_prepared(conn, items[1:2], to_ms(T0))  # same body, inserted first
    new = insert_fresh(conn, items, to_ms(T0))
    assert [(n.created, n.key) for n in new] == [
        (True, items[0][0]),
        (False, items[1][0]),
        (True, items[2][0]),
    ]
    assert new[1].id == taken.id
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 3
    other = _prepared(JobTemplate(command=("false",)), "sch-a", nominal)
    with pytest.raises(KeyConflict):
        insert_fresh(conn, [_prepared(TEMPLATE, "sch-d", nominal), other], to_ms(T0))
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 3  # nothing kept
    conn.execute("ROLLBACK")


def test_fresh_insert_without_conflicts_numbers_jobs_like_insert_prepared(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "m.db", FakeClock(T0))
    store.close()
    conn = connect(str(tmp_path / "m.db"))
    items = [_prepared(TEMPLATE, f"sch-{i}", T0) for i in range(3)]
    conn.execute("BEGIN IMMEDIATE")
    fresh = insert_fresh(conn, items, to_ms(T0))
    conn.execute("ROLLBACK")
    conn.execute("BEGIN IMMEDIATE")
    checked = insert_prepared(conn, items, to_ms(T0))
    conn.execute("ROLLBACK")
    assert fresh == checked

"""``jobctl store migrate``: a real SQLite store moved into a real PostgreSQL database of
its own. Every part of the store reads back the same through the PostgreSQL store; the
schedule fires its next occurrence only (nothing twice), no job id is reused; a non-empty
target, a daemon on the file and bad URLs are refused with one line. Fails without a
server under ``JOBCTL_REQUIRE_POSTGRES=1``."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from jobctl.cli.main import run
from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing, occurrence_key
from jobctl.domain.states import JobStatus, Outcome
from jobctl.store.base import Store, secrets_of
from jobctl.store.sqlite import SqliteStore
from tests.contract.conftest import PG_DSN, pg_database
from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli

pytestmark = pytest.mark.postgres
#: In the future of any real clock: real daemons leave every time here alone.
T0 = datetime(2031, 1, 1, 0, 30, tzinfo=UTC)
UID = 1000
HOURLY = ScheduleSpec(
    Timing("UTC", cron="0 * * * *"), Policy(), JobTemplate(("true",), max_attempts=1), UID, "hourly"
)


@pytest.fixture
def target() -> Iterator[str]:
    """A fresh database ``pgmove_…`` (dropped afterwards); its URL."""
    for name in pg_database("pgmove_"):
        yield urlunsplit(urlsplit(PG_DSN)._replace(path="/" + name))


def build_source(path: Path, clock: FakeClock, queue: str = "default") -> dict[str, Any]:
    """A store with jobs in every state, attempts, a schedule that fired 3 occurrences,
    a paused one with skips, queues, a webhook secret, audit records and a pruned job."""
    store = SqliteStore(path, clock, random.Random(3))
    try:
        hourly = store.create_schedule(HOURLY)
        other = store.create_schedule(
            ScheduleSpec(HOURLY.timing, Policy(), HOURLY.template, UID, "other")
        )
        store.pause_schedule(other.id)
        fired = []
        for _ in range(3):
            clock.advance(hours=1)
            fired += [job_id for _, job_id, _ in store.materialize(100).created]
        store.resume_schedule(other.id)  # its skipped occurrences: schedule_skips rows
        ids = {
            name: store.insert(
                [JobSpec(("true",), clock.now(), UID, key=name, queue=queue, max_attempts=tries)]
            )[0].job.id
            for name, tries in (("running", 1), ("dead", 1), ("retrying", 3))
        }
        ids["cancelled"] = store.insert(
            [JobSpec(("true",), clock.now() + timedelta(days=2), UID, key="cancelled")]
        )[0].job.id
        ids["succeeded"] = store.insert([JobSpec(("true",), clock.now(), UID, key="ok")])[0].job.id
        ids["future"] = store.insert(
            [JobSpec(("true",), clock.now() + timedelta(days=1), UID, key="future")]
        )[0].job.id
        claims = {c.job.id: c for c in store.claim_due("host:1:aa", 100, 30)}
        ends = [(i, Outcome.SUCCEEDED) for i in (*fired, ids["succeeded"])]
        ends += [(ids["dead"], Outcome.FAILED), (ids["retrying"], Outcome.FAILED)]
        for job_id, outcome in ends:
            code = 0 if outcome is Outcome.SUCCEEDED else 1
            store.finish(job_id, claims[job_id].generation, AttemptResult(outcome, code))
        gone = store.insert([JobSpec(("true",), clock.now(), UID, key="pruned")])[0].job.id
        store.cancel(gone, "to be pruned")
        clock.advance(seconds=1)
        assert store.prune({"cancelled": clock.now()}).total == 1
        store.cancel(ids["cancelled"], "by the test")  # after the prune: it stays
        store.set_queue(QueuePolicy("reports", concurrency=2, rate=1.5, burst=3, weight=2))
        store.set_queue(QueuePolicy(queue, concurrency=4, paused=True))
        secrets_of(store).create_secret(UID, "hook", "s3cret-value")
        store.audit([AuditRecord(clock.now(), "req-1", UID, UID, 42, "jobs.add", "7", 201)])
        store.flush_audit()
        return {"schedule": hourly.id, "ids": ids, "fired": fired, "pruned": gone}
    finally:
        store.close()


def snapshot(store: Store) -> dict[str, Any]:
    """Everything a user can read of the store."""
    jobs = store.list_jobs(None, None, 1000, None)
    return {
        "jobs": [store.get(j.id) for j in jobs],
        "dead": store.list_dead(None, None, None, 100),
        "schedules": store.list_schedules(),
        "schedule_totals": store.schedule_totals(),
        "queues": store.queues(),
        "stats": sorted(store.stats(), key=repr),
        "secrets": secrets_of(store).list_secrets(None),
        "audit": store.list_audit(),
        "history": store.schedule_history("hourly", 100),
    }


def _pg(url: str, clock: FakeClock) -> Any:
    from jobctl.store.pg.store import PostgresStore

    return PostgresStore(url, clock, random.Random(1), pool_size=2)


def test_everything_moves_and_the_schedule_fires_its_next_occurrence_only(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(T0)
    src = tmp_path / "jobctl.db"
    made = build_source(src, clock)
    sqlite = SqliteStore(src, clock, lock=False)
    before = snapshot(sqlite)
    sqlite.close()
    statuses = {j.status for j in before["jobs"]}
    assert statuses == set(JobStatus) and before["dead"] and before["secrets"]

    assert run(["store", "migrate", "--from", f"sqlite://{src}", "--to", target]) == 0
    out, err = capsys.readouterr()
    assert "jobctl: store migrate: jobs:" in err and f"{len(before['jobs'])} jobs" in out

    pg = _pg(target, clock)
    try:
        assert snapshot(pg) == before
        assert pg.materialize(100).created == ()  # 03:30: 03:00 fired on SQLite already
        clock.set(T0.replace(hour=4, minute=0))
        created = {sid: (job_id, nominal) for sid, job_id, nominal in pg.materialize(100).created}
        assert len(created) == 2  # one each: "hourly" and the resumed "other"
        new_id, nominal = created[made["schedule"]]
        new = pg.get(new_id)
        assert (new.key, nominal) == (occurrence_key(made["schedule"], clock.now()), clock.now())
        assert pg.materialize(100).created == ()
        jobs = pg.list_jobs(None, None, 1000, None)
        keys = [j.key for j in jobs if j.spec.schedule_id == made["schedule"]]
        fired = {j.key for j in before["jobs"] if j.spec.schedule_id == made["schedule"]}
        assert fired and sorted(keys) == sorted({*fired, new.key})  # the new one only, once
        # past job_id_high: the pruned job's id (the highest SQLite gave) is not reused
        assert sorted(i for i, _ in created.values()) == [made["pruned"] + 1, made["pruned"] + 2]
        [added] = pg.insert([JobSpec(("true",), clock.now(), UID, key="after")])
        assert added.job.id == made["pruned"] + 3
    finally:
        pg.close()


def test_a_non_empty_target_is_refused_unless_forced(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(T0)
    src = tmp_path / "jobctl.db"
    build_source(src, clock)
    assert run(["store", "migrate", "--from", str(src), "--to", target]) == 0
    pg = _pg(target, clock)
    try:
        extra = pg.insert([JobSpec(("true",), clock.now(), UID, key="only-on-pg")])[0].job.id
    finally:
        pg.close()
    capsys.readouterr()
    assert run(["store", "migrate", "--from", str(src), "--to", target]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("jobctl: error: ") and "not empty" in err[-1] and "--force" in err[-1]
    pg = _pg(target, clock)
    try:
        assert pg.get(extra).key == "only-on-pg"  # the refusal changed nothing
    finally:
        pg.close()
    assert run(["store", "migrate", "--from", str(src), "--to", target, "--force"]) == 0
    pg = _pg(target, clock)
    try:
        keys = {j.key for j in pg.list_jobs(None, None, 1000, None)}
        assert "only-on-pg" not in keys and "running" in keys
        [added] = pg.insert([JobSpec(("true",), clock.now(), UID, key="next")])
        assert added.job.id > extra  # the sequence never goes back
    finally:
        pg.close()


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--from", "mysql://h/db"], 2, "must be a SQLite file"),
        (["--to", "mysql://h/db"], 2, "must be a postgresql:// URL"),
        (["--to", "postgresql://u:hunter2@[bad/db"], 2, "bad PostgreSQL URL"),
        (["--to", "postgresql://u:hunter2@127.0.0.1:1/db"], 7, "cannot connect"),
        (["--from", "sqlite:///nowhere/jobctl.db"], 3, "no database at"),
    ],
)
def test_bad_urls_give_one_error_line(
    tmp_path: Path,
    target: str,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    says: str,
) -> None:
    src = tmp_path / "jobctl.db"
    SqliteStore(src, FakeClock(T0)).close()
    given = {"--from": str(src), "--to": target}
    given.update(zip(args[::2], args[1::2], strict=True))
    assert run(["store", "migrate", *[x for kv in given.items() for x in kv]]) == code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobctl: error: ") and says in lines[0]
    assert "hunter2" not in err + out


def test_show_dlq_and_schedules_read_the_same_through_daemons_before_and_after(
    tmp_path: Path, target: str
) -> None:
    """Through the CLI of a SQLite daemon, then of a PostgreSQL daemon after the move; the
    move is refused while the SQLite daemon holds the file."""
    home = tmp_path / "sqlite"
    d = DaemonProc(home, "--lease-ttl", "5", "--shutdown-grace", "1")
    d.db.parent.mkdir(parents=True)
    made = build_source(d.db, FakeClock(T0), queue="held")  # paused: nothing runs
    d.start()
    try:
        before = _read_cli(d, made["ids"].values())
        refused = cli(d, "store", "migrate", "--from", str(d.db), "--to", target)
        assert refused.returncode == 6, refused.stderr
        assert refused.stderr.startswith("jobctl: error: ") and "stop that daemon" in refused.stderr
    finally:
        d.stop()
    moved = cli(d, "store", "migrate", "--from", f"sqlite://{d.db}", "--to", target)
    assert moved.returncode == 0, moved.stderr
    p = DaemonProc(tmp_path / "pg", "--state-dir", str(tmp_path / "pg" / "state"))
    p.db_arg = target
    p.start()
    try:
        assert _read_cli(p, made["ids"].values()) == before
    finally:
        p.stop()


def _read_cli(d: DaemonProc, ids: Any) -> list[Any]:
    outs = []
    for args in (
        *[("show", str(i), "--json") for i in sorted(ids)],
        ("dlq", "list", "--json"),
        ("schedules", "list", "--json"),
    ):
        done = cli(d, *args)
        assert done.returncode == 0, (args, done.stderr)
        outs.append(json.loads(done.stdout))
    return outs


def test_export_reads_the_same_from_postgresql_as_from_the_sqlite_file(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "jobctl.db"
    build_source(src, FakeClock(T0))
    assert run(["store", "migrate", "--from", str(src), "--to", target]) == 0
    for what, fmt, owner in (
        ("jobs", "jsonl", []),
        ("attempts", "csv", []),
        ("schedules", "jsonl", []),
        ("jobs", "csv", ["--owner", str(UID)]),
        ("attempts", "jsonl", ["--owner", "0"]),
    ):
        outs = []
        for db in (str(src), target):
            capsys.readouterr()
            assert run(["export", what, "--format", fmt, "--db", db, *owner]) == 0
            outs.append(capsys.readouterr().out)
        assert outs[0] == outs[1], (what, fmt, owner)
        assert (outs[0].count("\n") > 1) is (owner[-1:] != ["0"])
    assert run(["export", "jobs", "--db", target.replace("/pgmove_", "/nope_")]) == 7
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("jobctl: error: cannot connect to postgresql://")


def test_a_target_a_daemon_is_live_on_is_refused_even_forced(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobctl.domain.clock import SystemClock
    from jobctl.domain.cluster import DaemonBeat
    from jobctl.store.pg.store import PostgresStore

    src = tmp_path / "jobctl.db"
    build_source(src, FakeClock(T0))
    live = PostgresStore(target, SystemClock(), pool_size=1)  # liveness is the server's time
    try:
        now = live.clock.now()
        live.daemon_beat(DaemonBeat("h:1:aa", "h", 1, "9", now, now, 0, 4, 30.0))
        assert run(["store", "migrate", "--from", str(src), "--to", target, "--force"]) == 4
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith("jobctl: error: ") and "live daemons (h:1:aa)" in line
        assert live.list_jobs(None, None, 10, None) == []
        live.daemon_stopped("h:1:aa")  # a cleanly stopped daemon is no obstacle
        assert run(["store", "migrate", "--from", str(src), "--to", target]) == 0
        assert live.list_jobs(None, None, 10, None) != []
    finally:
        live.close()


def test_a_row_postgresql_refuses_leaves_the_target_as_it_was(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """All or nothing: the bad row is the last of the last table, after everything else
    was copied, and nothing of it is kept."""
    import sqlite3

    src = tmp_path / "jobctl.db"
    build_source(src, FakeClock(T0))
    with sqlite3.connect(src) as conn:  # NUL: SQLite keeps it in TEXT, PostgreSQL cannot
        conn.execute(
            "UPDATE audit SET error = ? WHERE id = (SELECT max(id) FROM audit)", ("bad\x00byte",)
        )
    conn.close()
    assert run(["store", "migrate", "--from", str(src), "--to", target]) == 7
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        line.startswith("jobctl: error: moving into ")
        and "at the audit rows, nothing was kept" in line
    )
    pg = _pg(target, FakeClock(T0))
    try:
        assert pg.list_jobs(None, None, 10, None) == [] and pg.list_schedules() == []
        assert pg.queues() == [] and pg.list_audit() == []
    finally:
        pg.close()


def test_a_store_an_older_jobctl_left_is_brought_up_to_date_then_moved(
    tmp_path: Path, target: str
) -> None:
    from tests.old_schema import connect_at

    src = tmp_path / "jobctl.db"
    conn = connect_at(src, 1)
    conn.execute(
        "INSERT INTO jobs (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,"
        " max_attempts, backoff_base_ms, backoff_cap_ms, created_at, run_at, status)"
        " VALUES (41, 'old', 'fp', 'default', '[\"true\"]', '[]', '/', ?, 0, 3, 1000, 60000,"
        " ?, ?, 'scheduled')",
        (UID, int(T0.timestamp() * 1000), int(T0.timestamp() * 1000)),
    )
    conn.commit()
    conn.close()
    assert run(["store", "migrate", "--from", str(src), "--to", target]) == 0
    pg = _pg(target, FakeClock(T0))
    try:
        old = pg.get(41)
        assert (old.key, old.spec.command, old.status) == ("old", ("true",), JobStatus.SCHEDULED)
        [new] = pg.insert([JobSpec(("true",), T0, UID, key="new")])
        assert new.job.id == 42
    finally:
        pg.close()

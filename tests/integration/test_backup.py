"""``jobctl backup`` of a live database: consistent, checked, complete, atomic."""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from jobctl.cli.bodies import job_body
from jobctl.client import Client
from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def test_backup_while_jobs_are_being_written(daemon: DaemonProc, tmp_path: Path) -> None:
    accepted: list[int] = []
    warmed_up, stop = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with Client(daemon.socket) as c:
                while not stop.is_set():
                    accepted.append(c.enqueue(job_body(["true"], in_="1d", cwd="/"))["id"])
                    if len(accepted) == 20:
                        warmed_up.set()
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)
            warmed_up.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert warmed_up.wait(30)
        before = list(accepted)  # every one of these was committed before the backup began
        copy = tmp_path / "backup.db"
        out = cli(daemon, "backup", str(copy), "--db", str(daemon.db))
        during = len(accepted) - len(before)
    finally:
        stop.set()
        writer.join(30)
    assert not failures, failures
    assert out.returncode == 0, out.stderr
    assert during > 0  # the daemon kept accepting jobs while the copy was taken

    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # one file
        ids = {row[0] for row in conn.execute("SELECT id FROM jobs")}
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        # Counts kept by triggers match the rows: one committed instant, not a torn copy.
        counted = conn.execute("SELECT sum(n) FROM job_counts").fetchone()[0]
        version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
    finally:
        conn.close()
    assert set(before) <= ids and counted == jobs
    match = re.fullmatch(
        rf"backup {re.escape(str(copy))}: [\d.]+ KiB, schema version (\d+), (\d+) jobs, "
        r"0 schedules; integrity_check ok\n",
        out.stdout,
    )
    assert match, out.stdout
    assert (int(match[1]), int(match[2])) == (version, jobs)
    assert not Path(f"{copy}.tmp").exists() and not Path(f"{copy}-wal").exists()


def test_backup_refuses_to_overwrite_without_force(daemon: DaemonProc, tmp_path: Path) -> None:
    copy = tmp_path / "backup.db"
    copy.write_text("an older backup")
    refused = cli(daemon, "backup", str(copy), "--db", str(daemon.db))
    assert refused.returncode == 4
    assert refused.stderr == f"jobctl: error: {copy} exists; give --force to replace it\n"
    assert copy.read_text() == "an older backup"
    forced = cli(daemon, "backup", str(copy), "--db", str(daemon.db), "--force")
    assert forced.returncode == 0, forced.stderr
    assert sqlite3.connect(copy).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_backup_reads_jobctl_db_and_reports_a_missing_database(
    daemon: DaemonProc,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jobctl.cli.main import run

    monkeypatch.setenv("JOBCTL_DB", str(daemon.db))  # what the daemon's default honours too
    assert run(["backup", str(tmp_path / "a.db")]) == 0
    assert capsys.readouterr().out.startswith(f"backup {tmp_path / 'a.db'}: ")
    missing = tmp_path / "nope.db"
    assert run(["backup", str(tmp_path / "b.db"), "--db", str(missing)]) == 3
    assert capsys.readouterr().err == f"jobctl: error: no database at {missing}\n"


def test_a_copy_that_is_not_a_database_is_never_left_behind(tmp_path: Path) -> None:
    from jobctl.cli.main import run

    not_db = tmp_path / "not.db"
    not_db.write_text("plain text, not SQLite")
    assert run(["backup", str(tmp_path / "copy.db"), "--db", str(not_db)]) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not.db"]


def test_a_database_this_user_cannot_open_is_one_line_not_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user backing up root's 0600 database got "internal error: OperationalError"
    (exit 1). Root reads any file, so the refusal is played by the test: SQLite cannot
    open the file and the user may not read it."""
    from jobctl.cli.main import run

    db = tmp_path / "jobctl.db"
    sqlite3.connect(db).close()
    real = sqlite3.connect

    def refuse(target: str | Path, *args: Any, **kw: Any) -> sqlite3.Connection:
        if "mode=ro" in str(target):
            raise sqlite3.OperationalError("unable to open database file")
        opened: sqlite3.Connection = real(target, *args, **kw)
        return opened

    monkeypatch.setattr(sqlite3, "connect", refuse)
    monkeypatch.setattr("jobctl.cli.backup.os.access", lambda path, mode: False)
    assert run(["backup", str(tmp_path / "copy.db"), "--db", str(db)]) == 7
    assert capsys.readouterr().err == (
        f"jobctl: error: cannot read {db}: unable to open database file (permission "
        "denied: run it as root or the daemon's user)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobctl.db"]


@pytest.mark.parametrize("how", ["option", "env"])
def test_backup_of_a_postgresql_store_says_how_with_pg_dump(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobctl.cli.main import run

    url = "postgresql://jobctl:hunter2@db.example:5432/jobs_prod?sslmode=require"
    copy = tmp_path / "backup.dump"
    if how == "env":
        monkeypatch.setenv("JOBCTL_DB", url)
        code = run(["backup", str(copy)])
    else:
        code = run(["backup", str(copy), "--db", url])
    out, err = capsys.readouterr()
    [line] = err.splitlines()
    assert code == 2 and out == "" and not copy.exists()
    assert line.startswith("jobctl: error: the database is PostgreSQL (jobs_prod)")
    assert f"pg_dump --format=custom --file={copy} --dbname='postgresql://jobctl:***@" in line
    assert "hunter2" not in err

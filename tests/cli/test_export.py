"""``jobctl export``: rows of a real database file, as JSON lines and CSV (sqlite-utils)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from jobctl.cli.main import run
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import Outcome
from jobctl.store.sqlite import SqliteStore


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Path:
    """Two users' jobs (one attempt finished, one running) and a schedule with H."""
    path = tmp_path / "jobctl.db"
    store = SqliteStore(path, clock)
    try:
        now = clock.now()
        store.insert(
            [JobSpec(command=("echo", "a b"), run_at=now, owner_uid=1000, env=(("K", "v"),))]
        )
        store.insert([JobSpec(command=("true",), run_at=now, owner_uid=2000)])
        [claim] = [c for c in store.claim_due("w", 10, 30) if c.job.spec.owner_uid == 1000]
        store.finish(claim.job.id, claim.generation, AttemptResult(Outcome.SUCCEEDED, 0))
        template = JobTemplate(command=("backup.sh",))
        store.create_schedule(
            ScheduleSpec(Timing("Europe/London", cron="H 3 L * *"), Policy(), template, 1000)
        )
    finally:
        store.close()
    return path


def export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_jobs_as_json_lines(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = export(capsys, "jobs", "--db", str(db))
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["owner_uid"] for r in rows] == [1000, 2000]
    first = rows[0]
    assert first["command"] == ["echo", "a b"] and first["status"] == "succeeded"
    assert first["created_at"] == "2027-03-01T12:00:00Z"  # epoch ms shown as ISO-8601 UTC
    assert first["finished_at"].endswith("Z") and first["lease_until"] is None


def test_owner_narrows_every_export(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    for what, count in (("jobs", 1), ("attempts", 1), ("schedules", 0)):
        code, out, _ = export(capsys, what, "--db", str(db), "--owner", "2000")
        assert code == 0 and len(out.splitlines()) == count, what
    code, out, _ = export(capsys, "attempts", "--db", str(db), "--owner", "1000")
    assert [json.loads(line)["outcome"] for line in out.splitlines()] == ["succeeded"]


def test_attempts_as_csv_to_a_file(
    capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path
) -> None:
    target = tmp_path / "attempts.csv"
    code, out, err = export(capsys, "attempts", "--db", str(db), "-f", "csv", "-o", str(target))
    assert (code, out) == (0, "") and err == f"exported 2 attempts to {target}\n"
    row, running = list(csv.DictReader(io.StringIO(target.read_text())))
    assert (running["job_id"], running["outcome"], running["finished_at"]) == ("2", "", "")
    assert (row["job_id"], row["number"], row["outcome"], row["exit_code"]) == (
        "1",
        "1",
        "succeeded",
        "0",
    )


def test_schedules_keep_their_text_and_template(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    _, out, _ = export(capsys, "schedules", "--db", str(db), "--format", "csv")
    [row] = list(csv.DictReader(io.StringIO(out)))
    assert (row["cron"], row["tz"]) == ("H 3 L * *", "Europe/London")
    assert json.loads(row["template"])["command"] == ["backup.sh"]  # JSON text in CSV


def test_a_missing_default_database_says_how_to_name_the_daemons(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db (a daemon started with --db elsewhere) backup and export named only
    the default path; they now say how to give the daemon's database."""
    missing = tmp_path / "state" / "jobctl.db"
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setattr("jobctl.cli.backup.default_db", lambda: missing)
    hint = (
        f"jobctl: error: no database at {missing} (the default); give the daemon's with --db "
        "or JOBCTL_DB: 'jobctl config get db' prints it\n"
    )
    for argv in (["export", "jobs"], ["backup", str(tmp_path / "copy.db")]):
        assert run(argv) == 3
        out, err = capsys.readouterr()
        assert (out, err) == ("", hint)


def test_a_missing_database_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    code, out, err = export(capsys, "jobs", "--db", str(missing))
    assert code != 0 and out == ""
    assert err == f"jobctl: error: no database at {missing}\n"
    assert not missing.exists()  # read-only: never created


def test_the_export_never_writes_the_database(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    os.chmod(db, 0o400)
    before = db.read_bytes()
    code, _, _ = export(capsys, "jobs", "--db", str(db))
    assert code == 0 and db.read_bytes() == before

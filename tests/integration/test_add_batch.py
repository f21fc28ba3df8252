"""``jobctl add --batch FILE|-``: JSON lines in requests of CHUNK jobs; errors name the line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from jobctl.cli import batch
from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc

FAR = "2099-01-01T00:00:00Z"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(*jobs: object) -> str:
    return "".join((json.dumps(j) if not isinstance(j, str) else j) + "\n" for j in jobs)


@pytest.fixture
def sock(daemon: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> DaemonProc:
    monkeypatch.setenv("JOBCTL_SOCKET", str(daemon.socket))
    return daemon


def stored_count(daemon: DaemonProc) -> int:
    return len(daemon.client().list_jobs(limit=1000))


def test_batch_from_a_file_prints_one_id_per_job_in_order(
    capsys: pytest.CaptureFixture[str], sock: DaemonProc, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        jsonl(
            {"command": ["true"], "run_at": FAR, "queue": "q1", "priority": 5},
            "   ",
            {"command": ["echo", "b"], "run_at": FAR, "cwd": "/", "key": "batch-k"},
        )
    )
    code, out, err = run_cli(capsys, "add", "--batch", str(path))
    assert (code, err) == (0, "")
    ids = [int(x) for x in out.split()]
    assert len(ids) == 2 and ids[0] < ids[1]
    first, second = (sock.client().get(i) for i in ids)
    assert (first["queue"], first["priority"], first["cwd"]) == ("q1", 5, str(Path.cwd()))
    assert (second["command"], second["cwd"], second["key"]) == (["echo", "b"], "/", "batch-k")
    # the same file again: the keyed line answers the stored job, the other adds one
    code, out, _ = run_cli(capsys, "add", "--batch", str(path))
    assert code == 0 and int(out.split()[1]) == ids[1] and int(out.split()[0]) not in ids


def test_batch_from_stdin_with_json(
    capsys: pytest.CaptureFixture[str], sock: DaemonProc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(jsonl({"command": ["true"], "run_at": FAR})))
    code, out, _ = run_cli(capsys, "add", "--json", "--batch", "-")
    data = json.loads(out)
    assert code == 0 and len(data) == 1 and data[0]["created"] is True
    assert data[0]["status"] == "scheduled"


def test_requests_are_atomic_and_the_error_names_the_line(
    capsys: pytest.CaptureFixture[str],
    sock: DaemonProc,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch, "CHUNK", 2)
    good = {"command": ["true"], "run_at": FAR}
    path = tmp_path / "jobs.jsonl"
    # lines 1-2: request 1 (stored); lines 3, 5 (4 is blank): request 2, line 5 is bad
    path.write_text(jsonl(good, good, good, "", {**good, "priority": 5000}, good))
    code, out, err = run_cli(capsys, "add", "--batch", str(path))
    assert code == 2 and len(out.split()) == 2
    assert err.startswith("jobctl: error: --batch line 5: priority: ") and err.count("\n") == 1
    assert "nothing from line 3 on was enqueued; the 2 jobs before it were" in err
    assert stored_count(sock) == 2


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        (['{"command": ["true"]}', "{not json"], "--batch line 2: not valid JSON"),
        (
            ['{"command": ["true"]}', '["true"]'],
            "--batch line 2: a job or schedule must be a JSON object",
        ),
        (["", "  "], "--batch: no jobs in "),
        (['{"command": []}', '{"command": ["x"], "bogus": 1}'], "--batch line 1: command: "),
    ],
    ids=["bad-json", "not-an-object", "empty", "refused-by-the-daemon"],
)
def test_a_bad_file_enqueues_nothing(
    capsys: pytest.CaptureFixture[str],
    sock: DaemonProc,
    tmp_path: Path,
    lines: list[str],
    fragment: str,
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run_cli(capsys, "add", "--batch", str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"jobctl: error: {fragment}") and err.count("\n") == 1, err
    assert stored_count(sock) == 0
    if "daemon" in fragment or "bogus" in "".join(lines):
        assert "line 2: bogus: " in err and "(nothing was enqueued)" in err


@pytest.mark.parametrize(
    "extra",
    [["--queue", "q"], ["--cron", "0 6 * * *"], ["--", "true"], ["--in", "5m", "--shell"]],
    ids=["queue", "cron", "command", "two"],
)
def test_batch_refuses_the_options_of_one_job(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    code, out, err = run_cli(capsys, "add", "--batch", str(tmp_path / "none"), *extra)
    assert (code, out) == (2, "")
    assert err.startswith("jobctl: error: --batch takes every job from its lines; drop ")


def test_unreadable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "add", "--batch", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "--batch: cannot read " in err and err.count("\n") == 1


def test_schedule_lines_are_created_in_batches_each_answering_alone(
    capsys: pytest.CaptureFixture[str],
    sock: DaemonProc,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lines with cron or every are schedules (POST /v1/schedules with a list); a refused
    one is reported with its line and the others are created; ids come in file order."""
    monkeypatch.setattr(batch, "SCHEDULE_CHUNK", 2)
    job = {"command": ["true"], "run_at": FAR}
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        jsonl(
            {"cron": "0 6 * * *", "name": "daily", "job": {"command": ["./a.sh"]}},
            {"every": 3600, "job": {"command": ["./b.sh"], "cwd": "/"}},
            job,
            {"cron": "0 7 * * *", "name": "daily", "job": {"command": ["./c.sh"]}},
            {"cron": "0 0 30 2 *", "job": {"command": ["./never.sh"]}},
            {"cron": "15 * * * *", "tz": "Asia/Tokyo", "job": {"command": ["./d.sh"]}},
        )
    )
    code, out, err = run_cli(capsys, "add", "--batch", str(path))
    assert code != 0 and "2 schedule line(s) refused" in err
    assert "line 4: a schedule named 'daily' exists" in err and "line 5: " in err
    ids = out.split()
    assert [i.startswith("sch-") for i in ids] == [True, True, False, True]
    shown = {s["id"]: s for s in sock.client().schedules()}
    assert shown[ids[0]]["name"] == "daily" and shown[ids[0]]["job"]["cwd"] == str(Path.cwd())
    assert shown[ids[1]]["job"]["cwd"] == "/" and shown[ids[3]]["tz"] == "Asia/Tokyo"
    assert stored_count(sock) >= 1

"""``top --json`` and ``queues show`` against a real daemon (branch firsthour2)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobctl.cli.bodies import job_body
from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(tmp_path, "--shutdown-grace", "1", "--kill-grace", "1").start()
    yield d
    d.stop()


def cli(capsys: pytest.CaptureFixture[str], d: DaemonProc, *argv: str) -> tuple[int, str, str]:
    code = run([*argv, "--socket", str(d.socket)])
    out, err = capsys.readouterr()
    return code, out, err


def test_top_json_once_is_one_line_of_the_frames_data(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    c = daemon.client()
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)  # the job runs until the test writes to it: an event, not a sleep
    running = c.enqueue(job_body(["sh", "-c", f"cat {fifo}"], queue="reports", cwd=tmp_path))
    daemon.wait_for_line(f"event=started job={running['id']} ")
    code, out, err = cli(capsys, daemon, "top", "--json", "--once")  # was: no such option
    assert (code, err) == (0, "") and out.count("\n") == 1
    frame = json.loads(out)
    assert set(frame) == {"status", "running", "dead"}
    assert [j["id"] for j in frame["running"]] == [running["id"]]
    assert frame["running"][0]["attempts"][0]["number"] == 1
    assert "reports" in [q["queue"] for q in frame["status"]["queues"]]
    fifo.write_text("go\n")
    daemon.wait_for_line(f"event=succeeded job={running['id']} ")


def test_queues_show_is_one_queue_in_one_view(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc
) -> None:
    c = daemon.client()
    c.enqueue(job_body(["true"], queue="mail", at="2099-01-01T00:00:00Z"))
    c.set_queue("mail", {"concurrency": 2})
    c.queue_action("mail", "pause")
    c.set_worker_queue("work", ["uid:0"])
    code, out, err = cli(capsys, daemon, "queues", "show", "mail")  # was: no such command
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "queue mail: paused, concurrency 2, rate unlimited, weight 1",
        "  job defaults: limits none; on failure none",
        "  waiting: 1 (0 due now); running: 0",
        "  ended: 0 succeeded, 0 dead, 0 cancelled",
    ]
    code, out, _ = cli(capsys, daemon, "queues", "show", "mail", "--json")
    shown = json.loads(out)
    assert shown == next(q for q in c.queues() if q["queue"] == "mail")
    code, out, _ = cli(capsys, daemon, "queues", "show", "work")
    assert "queue work: served by workers" in out and "uid:0 (root)" in out
    work = json.loads(cli(capsys, daemon, "queues", "show", "work", "--json")[1])
    assert (work["workers"], work["leases"], work["live"]) == (["uid:0"], 0, [])
    code, out, err = cli(capsys, daemon, "queues", "show", "nope")
    assert (code, out) == (3, "") and err.startswith("jobctl: error: no queue 'nope'")


def test_rerun_enqueues_a_copy_of_a_finished_job(
    capsys: pytest.CaptureFixture[str], daemon: DaemonProc, tmp_path: Path
) -> None:
    c = daemon.client()
    old = c.enqueue(job_body(["sh", "-c", "echo ran"], queue="q", priority=3, cwd=tmp_path))
    daemon.wait_for_line(f"event=succeeded job={old['id']} ")
    code, out, err = cli(capsys, daemon, "rerun", str(old["id"]))  # was: no such command
    assert (code, err) == (0, "")
    new = c.get(int(out))
    assert new["id"] != old["id"] and new["key"] != old["key"]
    assert (new["command"], new["queue"], new["priority"]) == (old["command"], "q", 3)
    daemon.wait_for_line(f"event=succeeded job={new['id']} ")
    code, out, _ = cli(capsys, daemon, "rerun", str(old["id"]), "--in", "1h", "--json")
    assert code == 0 and json.loads(out)["status"] == "scheduled"
    code, out, err = cli(capsys, daemon, "rerun", str(json.loads(out)["id"]))
    assert (code, out) == (4, "") and "rerun takes a finished job" in err

"""The workers' CLI through a real daemon (issue 16, docs/workers.md): ``add --payload``
(text, @file, stdin, a schedule's template) and its one-line refusals; a schedule
edit moving a command template onto a worker queue refused; ``queues workers``
showing the list and the live workers, setting and clearing the list."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from jobctl.client import Client
from tests.integration.conftest import DaemonProc, daemon_env


def cli(d: DaemonProc, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    return subprocess.run([sys.executable, "-m", "jobctl", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd="/", input=stdin)  # fmt: skip


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_payload_job_from_text_file_and_stdin(daemon: DaemonProc, tmp_path: Path) -> None:
    body = {"task": "m:f", "kwargs": {"to": "ana@example.com"}}
    (tmp_path / "p.json").write_text(json.dumps(body))
    ids = [
        _ok(cli(daemon, "add", "--queue", "wq", "--payload", json.dumps(body))).strip(),
        _ok(cli(daemon, "add", "--queue", "wq", "--payload", f"@{tmp_path / 'p.json'}")).strip(),
        _ok(cli(daemon, "add", "--queue", "wq", "--payload", "-", stdin="[1, 2]")).strip(),
    ]
    shown = [json.loads(_ok(cli(daemon, "show", i, "--json"))) for i in ids]
    assert [s["payload"] for s in shown] == [body, body, [1, 2]]
    assert {s["queue"] for s in shown} == {"wq"} and shown[0]["command"] == []
    keyed = cli(daemon, "add", "--queue", "wq", "--key", "k", "--in", "1h", "--payload", "3")
    assert json.loads(_ok(cli(daemon, "show", keyed.stdout.strip(), "--json")))["key"] == "k"


def test_a_schedule_carries_a_payload(daemon: DaemonProc) -> None:
    made = cli(daemon, "add", "--cron", "0 6 * * *", "--tz", "Asia/Tokyo", "--queue", "wq",
               "--payload", '{"task": "m:daily"}', "--json")  # fmt: skip
    sched = json.loads(_ok(made))
    assert sched["job"]["payload"] == {"task": "m:daily"} and sched["tz"] == "Asia/Tokyo"
    assert json.loads(_ok(cli(daemon, "queues", "workers", "wq", "--json")))["workers"] == []
    other = _ok(cli(daemon, "add", "--cron", "0 6 * * *", "--", "true")).strip()
    moved = cli(daemon, "schedules", "edit", other, "--queue", "wq")
    assert moved.returncode != 0 and moved.stderr.count("\n") == 1, moved.stderr
    assert moved.stderr.startswith("jobctl: error:") and "served by workers" in moved.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--payload", "1", "--", "true"], "either a command, --http or --payload"),
        (["--payload", "1", "--http", "POST", "https://x.example/"], "either a command"),
        (["--payload", "{"], "--payload: not JSON"),
        (["--payload", "null"], "null is no payload"),
        (["--payload", json.dumps("x" * 70_000)], "at most 65536 bytes"),
        (["--payload", str(2**60)], "2^53"),
        (["--payload", "@/nonexistent/p.json"], "No such file"),
        (["--payload", "1", "--env", "A=1"], "--env applies to command jobs"),
        (["--payload", "1", "--on-failure", "true"], "--on-failure applies to command jobs"),
        (["--payload", "1", "--cwd", "/"], "--cwd applies to command jobs"),
    ],
)
def test_bad_payload_options_are_one_error_line(
    module_daemon: DaemonProc, args: list[str], words: str
) -> None:
    out = cli(module_daemon, "add", "--queue", "wq", *args)  # refused: the daemon unchanged
    assert out.returncode != 0 and out.stderr.startswith("jobctl: error:"), out
    assert out.stderr.count("\n") == 1 and words in out.stderr, out.stderr


def test_queues_workers_shows_sets_and_clears_the_list(daemon: DaemonProc) -> None:
    assert "not by workers" in _ok(cli(daemon, "queues", "workers", "default"))
    me = pwd.getpwuid(os.geteuid()).pw_name
    set_ = cli(daemon, "queues", "workers", "wq", "--allow", "uid:4242", "--allow", f"user:{me}")
    text = _ok(set_)
    assert "served by workers" in text and "uid:4242" in text and f"({me})" in text
    assert "no live workers" in text
    shown = json.loads(_ok(cli(daemon, "queues", "workers", "wq", "--json")))
    assert sorted(shown["workers"]) == sorted(["uid:4242", f"uid:{os.geteuid()}"])
    assert shown["live"] == []
    cleared = json.loads(_ok(cli(daemon, "queues", "workers", "wq", "--clear-allow", "--json")))
    assert cleared["workers"] == []


def test_queues_workers_lists_the_live_workers(daemon: DaemonProc) -> None:
    for n in range(2):
        _ok(cli(daemon, "add", "--queue", "wq", "--payload", str(n)))
    with Client(daemon.socket) as c:
        assert len(c.lease(["wq"], 5, 0, 60)) == 2
    shown = json.loads(_ok(cli(daemon, "queues", "workers", "wq", "--json")))
    assert shown["leases"] == 2
    assert [(w["uid"], w["leases"]) for w in shown["live"]] == [(os.geteuid(), 2)]
    text = _ok(cli(daemon, "queues", "workers", "wq"))
    assert "leases held: 2" in text and "LEASE UNTIL" in text and "(in " in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--allow", "uid:x"], "takes uid:N, gid:N"),
        (["--allow", "alice"], "takes uid:N, gid:N"),
        (["--allow", "user:no-such-user-here"], "no user of that name"),
        (["--allow", "uid:1", "--clear-allow"], "either --allow or --clear-allow"),
    ],
)
def test_bad_queues_workers_options_are_one_error_line(
    module_daemon: DaemonProc, args: list[str], words: str
) -> None:
    out = cli(module_daemon, "queues", "workers", "wq", *args)  # refused: nothing changes
    assert out.returncode != 0 and out.stderr.startswith("jobctl: error:"), out
    assert out.stderr.count("\n") == 1 and words in out.stderr, out.stderr


def test_a_queue_with_command_jobs_cannot_get_workers(daemon: DaemonProc) -> None:
    _ok(cli(daemon, "add", "--queue", "cq", "--in", "1h", "--", "true"))
    out = cli(daemon, "queues", "workers", "cq", "--clear-allow")
    assert out.returncode != 0 and "queue of their own" in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1

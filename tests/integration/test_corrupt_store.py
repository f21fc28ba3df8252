"""Short form of the corrupt-store drill (issue 13, item 2), on a real daemon."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.cli.errors import EXIT_CODES
from jobctl.errors import StoreCorrupt
from tests.integration.conftest import DaemonProc, daemon_env
from tests.unit.test_store_health import PAGE, damage_pages, make_store

CORRUPT_EXIT = dict(EXIT_CODES)[StoreCorrupt]


def _random(db: Path, good: bytes) -> None:
    db.write_bytes(os.urandom(len(good)))


def _truncated(db: Path, good: bytes) -> None:
    db.write_bytes(good[: len(good) // 2])


def _text(db: Path, good: bytes) -> None:
    db.write_text("this is not a database\n" * 200)


def _pages(db: Path, good: bytes) -> None:
    db.write_bytes(good)
    with db.open("r+b") as f:
        for page in (5, 40, len(good) // PAGE - 3):
            f.seek(page * PAGE)
            f.write(os.urandom(PAGE))


def _header(db: Path, good: bytes) -> None:
    db.write_bytes(good[:100] + os.urandom(PAGE - 100) + good[PAGE:])


@pytest.mark.parametrize("damage", [_random, _truncated, _text, _pages, _header])
def test_start_up_refuses_a_corrupt_store_in_one_line(
    tmp_path: Path, damage: Callable[[Path, bytes], None]
) -> None:
    good = tmp_path / "good.db"
    make_store(good, jobs=2000)
    db = tmp_path / "state" / "jobctl.db"
    db.parent.mkdir(mode=0o700)  # private already: the daemon has nothing to tighten
    damage(db, good.read_bytes())
    db.chmod(0o600)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobctl",
            "daemon",
            "--db",
            str(db),
            "--socket",
            str(tmp_path / "s"),
        ],
        env=daemon_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = out.stderr.splitlines()
    assert out.returncode == CORRUPT_EXIT == 11, out.stderr
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"jobctl: error: database {db} is corrupt (")
    assert "docs/operations.md" in lines[0]
    assert not (tmp_path / "s").exists()


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=30)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def _request(d: DaemonProc, method: str, path: str, body: object = None) -> tuple[int, str, object]:
    conn = _UnixHTTP(d.socket)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read().decode()
        return resp.status, resp.getheader("content-type") or "", json.loads(raw)
    finally:
        conn.close()


def test_damage_found_while_running_degrades_the_daemon(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    """Before: plain-text 500s, and the materializer logged `malformed` every second."""
    d = make_daemon(start=False)
    d.db.parent.mkdir(parents=True)
    make_store(d.db)
    d.start()
    damage_pages(d.db)
    status, kind, body = _request(d, "GET", "/v1/jobs?limit=500")
    assert (status, kind) == (503, "application/json"), body
    assert isinstance(body, dict) and body["error"]["code"] == "store_corrupt"
    d.wait_for_line("event=store_corrupt")
    job = {"command": ["true"], "cwd": "/"}
    for _ in range(5):
        status, kind, body = _request(d, "POST", "/v1/jobs", job)
        assert (status, kind) == (503, "application/json"), body
        assert isinstance(body, dict) and body["error"]["code"] == "store_corrupt"
    status, _, st = _request(d, "GET", "/v1/status")
    assert status == 200 and isinstance(st, dict)
    assert st["state"] == "degraded" and "is corrupt" in st["degraded"]
    env = daemon_env() | {"JOBCTL_SOCKET": str(d.socket)}
    shown = subprocess.run(
        [sys.executable, "-m", "jobctl", "status"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0 and "DEGRADED" in shown.stdout, shown
    added = subprocess.run(
        [sys.executable, "-m", "jobctl", "add", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert added.returncode == CORRUPT_EXIT and added.stderr.count("\n") == 1, added.stderr
    d.stop()
    d.wait_for_line("event=stopped")
    audit = "logger=jobctl.audit "  # one record per request, as for any request
    bad = [
        line for line in d.log if ("corrupt" in line or "malformed" in line) and audit not in line
    ]
    assert len(bad) == 1 and "level=ERROR" in bad[0], bad

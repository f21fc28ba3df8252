"""The real daemon under a stand-in for systemd: a notify socket it reports to, and a
listening socket handed to it as fd 3 exactly as a ``.socket`` unit would."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobctl.client import Client
from tests.engine.test_systemd_activation import SHIM, listener
from tests.integration.conftest import DaemonProc, daemon_env


class Notifications:
    """The datagrams the daemon sends to its NOTIFY_SOCKET, read as they arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.seen: list[str] = []

    def next(self, timeout: float = 20) -> str:
        self.sock.settimeout(timeout)
        message = self.sock.recv(65536).decode()
        self.seen.append(message)
        return message

    def until(self, predicate: Callable[[str], bool], timeout: float = 20) -> str:
        """Read datagrams until one matches (each read blocks on the socket: a real event)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next(max(0.01, deadline - time.monotonic()))
            if predicate(message):
                return message

    def rest(self) -> list[str]:
        """Whatever is still queued, without waiting."""
        self.sock.setblocking(False)
        out = []
        while True:
            try:
                out.append(self.sock.recv(65536).decode())
            except BlockingIOError:
                return out


@pytest.fixture
def notifications(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Notifications]:
    n = Notifications(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(n.path))  # the daemon's env is copied from ours
    with n.sock:
        yield n


def fields(message: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in message.split("\n"))


def test_ready_only_once_the_socket_answers_then_status_and_stopping(
    make_daemon: Callable[..., DaemonProc], notifications: Notifications
) -> None:
    d = make_daemon(start=False).start(wait=False)
    assert d.proc is not None
    ready = fields(notifications.until(lambda m: "READY=1" in m))
    assert ready["MAINPID"] == str(d.proc.pid)
    assert ready["STATUS"] == f"serving on {d.socket}"
    with Client(d.socket) as c:  # at READY=1 the socket already answers requests
        assert c.status()["pid"] == d.proc.pid
    assert notifications.seen[0] == "STATUS=starting: recovering jobs of a previous run"
    assert not any("WATCHDOG=1" in m for m in notifications.seen)  # no WatchdogSec here
    status = notifications.next()
    assert status == "STATUS=running 0/16, due lag 0s, 0 schedules"
    d.signal(signal.SIGTERM)
    stopping = notifications.until(lambda m: "STOPPING=1" in m)
    assert stopping == "STOPPING=1\nSTATUS=stopping: 0 running"
    assert d.wait() == 0


def test_watchdog_pings_carry_live_status_and_stop_at_shutdown(
    make_daemon: Callable[..., DaemonProc],
    notifications: Notifications,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # a ping every 0.2 s
    d = make_daemon()
    notifications.until(lambda m: "READY=1" in m)
    idle = "WATCHDOG=1\nSTATUS=running 0/16, due lag 0s, 0 schedules"
    notifications.until(lambda m: m == idle)  # (a loaded machine may withhold one first)
    gate = tmp_path / "gate"
    command = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.01; done"]
    job = d.client().enqueue({"command": command, "cwd": str(tmp_path)})
    notifications.until(lambda m: m.startswith("WATCHDOG=1\nSTATUS=running 1/16, "))
    gate.touch()
    d.wait_for_line(f"event=succeeded job={job['id']} ")
    notifications.until(lambda m: m == idle)
    d.signal(signal.SIGTERM)
    notifications.until(lambda m: m.startswith("STOPPING=1"))
    assert d.wait() == 0
    assert not [m for m in notifications.rest() if "WATCHDOG=1" in m]


class ActivatedDaemon(DaemonProc):
    """A daemon started the way systemd starts a socket-activated service."""

    def __init__(self, tmp: Path, sock: socket.socket, *args: str) -> None:
        super().__init__(tmp, *args)
        self.passed = sock

    def start(self, *extra: str, wait: bool = True) -> DaemonProc:
        fd = self.passed.fileno()
        program = [sys.executable, "-m", "jobctl", "daemon", "--db", str(self.db)]
        program += ["--socket", str(self.socket), *self.args, *extra]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SHIM, str(fd), "self", *program],
            pass_fds=(fd,),
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=daemon_env(),
        )
        self._pumped = threading.Event()
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        if wait:
            self.wait_for_line("event=ready")
        return self


@pytest.fixture
def activated(tmp_path: Path) -> Iterator[tuple[socket.socket, Path, list[DaemonProc]]]:
    path = tmp_path / "activated.sock"
    made: list[DaemonProc] = []
    with listener(path) as sock:
        yield sock, path, made
        for d in made:
            d.stop()


def test_serves_on_the_socket_systemd_passed_and_leaves_it_for_the_next_start(
    tmp_path: Path, activated: tuple[socket.socket, Path, list[DaemonProc]]
) -> None:
    sock, path, made = activated
    d = ActivatedDaemon(tmp_path, sock, "--shutdown-grace", "1", "--kill-grace", "2")
    made.append(d.start(wait=False))
    d.wait_for_line(f"event=socket_inherited fd=3 path={path}")
    d.wait_for_line(f"socket={path} db=")  # event=ready names the socket it serves on
    with Client(path) as c:
        assert c.status()["pid"] == d.proc.pid  # type: ignore[union-attr]
        job = c.enqueue({"command": ["true"], "cwd": str(tmp_path)})
    d.wait_for_line(f"event=succeeded job={job['id']} ")
    assert not d.socket.exists()  # it did not bind a socket of its own
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    assert path.exists()  # systemd's socket file stays: the next start serves on it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as early:
        early.connect(str(path))  # between two daemons: the request waits in the backlog
        early.sendall(b"GET /v1/status HTTP/1.1\r\nHost: jobctl\r\nConnection: close\r\n\r\n")
        again = ActivatedDaemon(tmp_path, sock, "--shutdown-grace", "1", "--kill-grace", "2")
        made.append(again.start(wait=False))
        early.settimeout(20)
        assert early.recv(65536).startswith(b"HTTP/1.1 200 ")

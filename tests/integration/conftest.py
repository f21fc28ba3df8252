"""A real daemon in a subprocess on a temp socket and database."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobctl.client import Client


class DaemonProc:
    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.db = tmp / "state" / "jobctl.db"
        #: What ``--db`` is given: the SQLite file, or a ``postgresql://`` URL.
        self.db_arg = str(self.db)
        self.socket = tmp / "run" / "jobctl.sock"
        self.args = args
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self._used: set[int] = set()
        self._client: Client | None = None
        #: Words before the daemon's command, e.g. ``prlimit --nofile=256:256 --``.
        self.prefix: list[str] = []

    def start(self, *extra: str, wait: bool = True) -> DaemonProc:
        # The daemon makes its database's (or --state-dir's) directory but none above it.
        self.tmp.mkdir(parents=True, exist_ok=True)
        cmd = [
            *self.prefix,
            sys.executable,
            "-m",
            "jobctl",
            "daemon",
            "--db",
            self.db_arg,
            "--socket",
            str(self.socket),
            *self.args,
            *extra,
        ]
        self.proc = subprocess.Popen(
            cmd,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            env=daemon_env() | self.env,
        )
        self._pumped = threading.Event()
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        if wait:
            self.wait_for_line("event=ready")
        return self

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        with proc.stderr:
            for line in proc.stderr:
                self.lines.put(line)
        self._pumped.set()

    def wait_for_line(self, fragment: str, timeout: float = 60) -> str:
        """Block until the daemon logs a line containing ``fragment`` (an event, not a sleep).

        Each matched line is used up, so waiting twice for the same fragment waits for two
        lines; lines may arrive in any order relative to the waits.
        """
        for i, line in enumerate(self.log):
            if i not in self._used and fragment in line:
                self._used.add(i)
                return line
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"daemon never logged {fragment!r}; log:\n" + "".join(self.log)
                ) from None
            self.log.append(line)
            if fragment in line:
                self._used.add(len(self.log) - 1)
                return line

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc:
            terminate(self.proc)
        if self.proc and self.proc.stderr and not self.proc.stderr.closed:
            self._pumped.wait(5)

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.socket)
        return self._client


def terminate(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds, unless it has ended already."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def daemon_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("JOBCTL_SOCKET", None)
    env.pop("JOBCTL_DB", None)
    return env


#: The options every test daemon runs with (short leases and grace periods).
TEST_DAEMON_ARGS = ("--lease-ttl", "5", "--kill-grace", "2", "--shutdown-grace", "1")


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProc]]:
    made: list[DaemonProc] = []

    def make(*args: str, start: bool = True, env: dict[str, str] | None = None) -> DaemonProc:
        d = DaemonProc(tmp_path, *TEST_DAEMON_ARGS, *args, env=env)
        made.append(d)
        return d.start() if start else d

    yield make
    for d in made:
        d.stop()


@pytest.fixture
def daemon(make_daemon: Callable[..., DaemonProc]) -> DaemonProc:
    return make_daemon()


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """One daemon shared by a module's tests, for tests that neither need a fresh daemon
    nor change what the others sharing it see (a refused command line, a job of their own
    far in the future): a daemon's start is a few seconds of a loaded 2-core machine, and
    most of such a test's time. Tests that wait for log lines or restart it take their own
    (:func:`daemon`)."""
    yield from shared_daemon(tmp_path_factory)


def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """A started daemon in a directory of its own, stopped afterwards (for fixtures of a
    wider scope than a test's, as :func:`module_daemon`)."""
    d = DaemonProc(tmp_path_factory.mktemp("daemon"), *TEST_DAEMON_ARGS)
    try:
        yield d.start()
    finally:
        d.stop()


def wait_until(predicate: Callable[[], object], timeout: float = 20, what: str = "") -> None:
    """Poll a condition the test cannot get an event for (a file another process writes)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.01)

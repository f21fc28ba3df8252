"""What every drill shares: a real daemon in a subprocess, libfaketime, the one summary line.

The drills are operator's-bad-day scripts, not unit tests: they start real daemons on real
SQLite files, send real signals and read what happened through the API and through a
journal the jobs' own commands write. Each drill has a ``run(...)`` function returning a
:class:`Result` (the short forms in tests/drills call it with small sizes) and a ``main``
that prints the result's one line and exits 1 when a promise broke.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl.client import Client

#: Where Debian puts libfaketime; the multi-threaded flavour is the one a daemon needs.
FAKETIME_LIBS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
)


@dataclass
class Result:
    """A drill's figures and whether every promise held; ``line()`` is its summary."""

    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return not self.broken

    def expect(self, promise: bool, what: str) -> None:
        """Record ``what`` as a broken promise unless ``promise`` holds."""
        if not promise:
            self.broken.append(what)

    def line(self) -> str:
        if self.skipped is not None:
            return f"{self.name} skipped: {self.skipped}"
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        figures = " ".join(f"{k}={v}" for k, v in self.figures.items()) + f" load={load}"
        verdict = "ok" if self.ok else "BROKEN: " + "; ".join(self.broken)
        return f"{self.name} {figures} {verdict}"


def finish(result: Result) -> int:
    """Print the one summary line; the exit status says whether a promise broke."""
    print(result.line(), flush=True)
    return 0 if result.ok else 1


def workdir(name: str) -> Path:
    """A fresh directory for one drill run (kept afterwards: the daemon logs are in it)."""
    return Path(tempfile.mkdtemp(prefix=f"jobctl-drill-{name}-"))


def faketime_lib() -> str | None:
    """The path of libfaketime, or None where it is not installed."""
    override = os.environ.get("JOBCTL_DRILL_FAKETIME")
    for path in (override, *FAKETIME_LIBS) if override else FAKETIME_LIBS:
        if path and Path(path).exists():
            return path
    return None


def faketime_env(spec: str | Path, *, monotonic: bool) -> dict[str, str]:
    """The environment that puts a process on a fake clock.

    ``spec`` is a libfaketime spec (``@2027-03-14 06:50:00 x60``: start there, run 60
    times faster), or a file holding one, which is read again every second, so writing it
    moves the clock of a running daemon (a clock jump). With ``monotonic=False``
    CLOCK_MONOTONIC stays real, as on a host whose clock is stepped; libfaketime 0.9.10
    then makes Python's ``time.sleep`` fail with EINVAL (its absolute monotonic
    ``clock_nanosleep`` is shifted), which stops the daemon's log thread: a tool
    artifact, so only the clock-step drill, which needs a real monotonic clock, uses it.
    """
    lib = faketime_lib()
    if lib is None:
        raise RuntimeError("libfaketime is not installed")
    env = {"LD_PRELOAD": lib}
    if isinstance(spec, Path):
        env |= {"FAKETIME_TIMESTAMP_FILE": str(spec), "FAKETIME_CACHE_DURATION": "1"}
    else:
        env["FAKETIME"] = spec
    if not monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    return env


def clean_env() -> dict[str, str]:
    """This process's environment without what would point a daemon elsewhere."""
    env = dict(os.environ)
    for name in ("JOBCTL_SOCKET", "JOBCTL_DB", "JOBCTL_CONFIG", "LD_PRELOAD"):
        env.pop(name, None)
    return env


class Daemon:
    """One daemon on ``db``: started, killed and restarted by the drill."""

    def __init__(
        self,
        root: Path,
        *args: str,
        db: Path | None = None,
        env: dict[str, str] | None = None,
        prefix: Iterable[str] = (),
    ) -> None:
        self.root = root
        self.db = db or root / "jobctl.db"
        self.socket = root / "jobctl.sock"
        self.log = root / "daemon.log"
        self.args = list(args)
        self.env = env or {}
        self.prefix = list(prefix)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def command(self, db: str | Path | None = None, socket: Path | None = None) -> list[str]:
        db_arg, sock = str(db or self.db), str(socket or self.socket)
        base = [sys.executable, "-m", "jobctl", "daemon", "--db", db_arg, "--socket", sock]
        return [*self.prefix, *base, *self.args]

    def start(self, timeout: float = 90) -> Daemon:
        """Start and wait until the socket answers (or the daemon exited: a crash drill)."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stderr=log,
                stdout=log,
                stdin=subprocess.DEVNULL,
                env=clean_env() | self.env,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return self
            try:
                with Client(self.socket) as c:
                    c.status()
                return self
            except Exception:
                time.sleep(0.02)
        raise RuntimeError(f"daemon did not come up in {timeout:g}s; see {self.log}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait: the graceful stop. Returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def client(self) -> Client:
        return Client(self.socket)


def until(check: Callable[[], bool], timeout: float, step: float = 0.1) -> bool:
    """Poll ``check`` until it holds or ``timeout`` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


def settled(d: Daemon, timeout: float) -> bool:
    """Wait until nothing is scheduled or running (restarting a daemon that died)."""

    def idle() -> bool:
        if not d.alive():
            d.start()
        try:
            with d.client() as c:
                counts = c.status()["counts"]
        except Exception:
            return False
        return bool(counts["scheduled"] == 0 and counts["running"] == 0)

    return until(idle, timeout, 0.2)


def all_jobs(c: Client) -> list[dict[str, Any]]:
    """Every job in the store, whatever its state, following the pages of the list."""
    jobs: list[dict[str, Any]] = []
    seen: set[int] = set()
    for state in ("scheduled", "running", "succeeded", "dead", "cancelled"):
        for job in _listed(c, state):
            if job["id"] not in seen:
                seen.add(job["id"])
                jobs.append(job)
    return jobs


def _listed(c: Client, state: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    before: int | None = None
    while True:
        page = c.list_jobs(status=state, limit=500, before=before)
        out.extend(page)
        if len(page) < 500:
            return out
        before = min(j["id"] for j in page)


def integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` of a store no daemon has open ("ok" when sound)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    return "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:3])


def journal_command(
    journal: Path, seconds: float, lock: str = "$JOBCTL_JOB_ID", until: Path | None = None
) -> list[str]:
    """A command that writes what ran to ``journal``, independently of jobctl's records.

    Each run appends ``start <job id> <attempt> <key>`` and, unless it is interrupted,
    ``end ...``. It holds ``flock`` on a lock file named by ``lock`` (the job id, or the
    schedule id) while it runs; a second live copy cannot take it and appends ``overlap``.
    It runs ``seconds``, or with ``until`` until that file exists.
    """
    locks = journal.parent / "locks"
    locks.mkdir(exist_ok=True)
    who = '$JOBCTL_JOB_ID $JOBCTL_ATTEMPT "$JOBCTL_JOB_KEY"'
    work = f'while [ ! -e "{until}" ]; do sleep 0.05; done' if until else f"sleep {seconds:g}"
    script = (
        f'exec 9>>"{locks}/{lock}"; '
        f'flock -n 9 || echo overlap {who} >> "{journal}"; '
        f'echo start {who} >> "{journal}"; '
        f"{work}; "
        f'echo end {who} >> "{journal}"'
    )
    return ["sh", "-c", script]


@dataclass
class Journal:
    """What the jobs' commands wrote: runs per job and per key, overlaps."""

    starts: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    keys: dict[str, set[int]] = field(default_factory=dict)
    overlaps: int = 0

    @classmethod
    def read(cls, path: Path) -> Journal:
        j = cls()
        if not path.exists():
            return j
        for line in path.read_text().splitlines():
            kind, job_id, _attempt, *key = line.split(" ")
            jid = int(job_id)
            if kind == "overlap":
                j.overlaps += 1
            elif kind == "start":
                j.starts[jid] = j.starts.get(jid, 0) + 1
                if key and key[0]:
                    j.keys.setdefault(key[0], set()).add(jid)
            elif kind == "end":
                j.ends[jid] = j.ends.get(jid, 0) + 1
        return j


def proc_environ_has(marker: str) -> list[int]:
    """Pids of live processes whose environment contains ``marker`` (escaped helpers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != "Z":
            found.append(int(entry.name))
    return found


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists (cleaning up after a drill that failed)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass

"""A real ``jobctl daemon`` on temp paths (:class:`Daemon`), its log's timestamps, and
waiting for the shared machine to calm down before a measurement (:func:`wait_quiet`)."""

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from _base import JOBCTL_BIN, ROOT, Rss, log, proc_status_kb, spawn, stop_proc

# == daemons, quiet waits and reports (bench_schedules.py, bench_herd.py) ==================


def clean_env(workdir: Path) -> dict[str, str]:
    """The environment for jobctl subprocesses: no JOBCTL_* settings, no user config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    env["XDG_CONFIG_HOME"] = str(workdir / "config")  # empty: no jobctl.toml applies
    return env


_TS = re.compile(rb"^ts=(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_ts(line: bytes) -> float | None:
    """Epoch seconds of a logfmt daemon line (``ts=`` is local time with milliseconds)."""
    m = _TS.match(line)
    if not m:
        return None
    stamp = m.group(1).decode()
    t = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S"))
    return t + int(stamp[20:]) / 1000


class Daemon:
    """A real ``jobctl daemon`` (the venv's console script) on temp paths.

    Waits for ``event=ready`` on stderr; ``t_spawn``/``t_ready`` are wall-clock times.
    """

    def __init__(
        self,
        workdir: Path,
        concurrency: int = 16,
        db: Path | str | None = None,
        ready_timeout: float = 300.0,
        env: dict[str, str] | None = None,
    ) -> None:
        """``db`` is a SQLite file (default: one in ``workdir``) or a ``postgresql://``
        URL; on PostgreSQL the daemon's state (logs) goes to ``workdir/state``."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.dir = workdir
        self.db = db or workdir / "jobctl.db"
        pg = isinstance(self.db, str)
        self.sock = workdir / "jobctl.sock"
        self.log_path = workdir / "daemon.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.t_spawn = time.time()
        self.proc = spawn(
            [
                JOBCTL_BIN,
                "daemon",
                "--db",
                str(self.db),
                "--socket",
                str(self.sock),
                "--concurrency",
                str(concurrency),
                *(["--state-dir", str(workdir / "state")] if pg else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=clean_env(workdir) | (env or {}),  # settings: JOBCTL_* on top
        )
        self.pid = self.proc.pid
        deadline = self.t_spawn + ready_timeout
        pos = 0
        with open(self.log_path, "rb") as f:
            while True:
                f.seek(pos)
                chunk = f.read()
                cut = chunk.rfind(b"\n") + 1
                pos += cut
                if b"event=ready" in chunk[:cut]:
                    self.t_ready = time.time()
                    break
                if self.proc.poll() is not None or time.time() > deadline:
                    tail = self.log_path.read_bytes()[-2000:].decode(errors="replace")
                    self.stop()
                    raise RuntimeError(f"daemon did not become ready:\n{tail}")
                time.sleep(0.01)

    def client(self, timeout: float = 120.0) -> Any:
        from jobctl.client.client import Client

        return Client(self.sock, timeout=timeout)

    def rss(self) -> Rss:
        return {
            "rss_mb": proc_status_kb(self.pid, "VmRSS") / 1024,
            "hwm_mb": proc_status_kb(self.pid, "VmHWM") / 1024,
        }

    def stop(self) -> None:
        stop_proc(self.proc)
        self._log.close()


def _cpu_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    idle = vals[3] + vals[4]
    return sum(vals) - idle, sum(vals)


def background_cores(seconds: float = 1.0) -> float:
    """CPU cores busy (all processes) while this script sleeps."""
    b0, t0 = _cpu_busy()
    time.sleep(seconds)
    b1, t1 = _cpu_busy()
    return (b1 - b0) / max(1, t1 - t0) * len(os.sched_getaffinity(0))


BACKGROUND: list[float] = []
QUIET_CORES = 0.3
QUIET_BUDGET = [300.0]  # seconds, for the whole script (--quiet-wait)


def wait_quiet(what: str) -> float:
    """Before a measurement, wait (within the budget) until other processes are quiet.

    Other engineers run tests and benchmarks on this 2-core machine; the CPU they use
    just before each measurement is recorded in the report.
    """
    waited = 0.0
    while True:
        t = time.monotonic()
        bg = background_cores(1.0)
        if bg <= QUIET_CORES or QUIET_BUDGET[0] <= 0:
            break
        time.sleep(2.0)
        spent = time.monotonic() - t
        QUIET_BUDGET[0] -= spent
        waited += spent
    if waited:
        log(f"waited {waited:.0f} s for other processes to go quiet before {what}")
    BACKGROUND.append(bg)
    return bg


def extract_src(rev: str, tmp: Path) -> tuple[Path, str]:
    """``src/`` of ``rev`` extracted under ``tmp`` with ``git archive`` (read-only for the
    repository, and unaffected by edits to the working tree): (its path, the short rev)."""
    short = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest = tmp / f"src-{short}"
    if not dest.exists():
        dest.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", short, "src"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "src", short

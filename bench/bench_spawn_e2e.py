#!/usr/bin/env python3
"""End to end against the host's raw spawn rates, in one run (issue 17).

Prints, in this order and from the same run: the load average; the raw rates of
bench_spawn.py (asyncio, Popen, Popen 16 in flight, posix_spawn 16 in flight); then
jobctl's end-to-end rate for N `true` jobs due at once, with the spawn helper and with
``job_spawner = "inline"`` (the daemon's own Popen, as before the helper), for jobs of
the daemon's own user and, as root, of another user (a temporary account, enqueued over
the socket by that user's own process); the burst "fully started" time (due to the last
attempt's start); dispatch lag at light load (p50/p99/max of attempt start - run_at);
daemon and helper CPU per job; huey's end-to-end rate for the same jobs; and the ratios
the targets name.

usage: python bench/bench_spawn_e2e.py [--jobs N] [--burst N] [--lag N] [--no-huey]
       [--src DIR]   (default: this tree's src/)
       [--ref-src DIR]  the burst's inline run from another tree (e.g. main's src: the
                        'today' reference of issue 17's burst target)
       [--no-inode-wait]  measure at once even within six minutes of a previous spawn
                        bench's removal of its files (see :func:`wait_inodes_quiet`)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bench_spawn  # noqa: E402

#: Per run (pid in the name): two runs at once must not delete each other's account.
BENCH_USER = f"jcb{os.getpid()}"
_ENQUEUE_AS = r"""
import http.client, json, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
c = C("localhost", timeout=120)
jobs = json.loads(sys.stdin.read())
for i in range(0, len(jobs), 1000):
    body = json.dumps(jobs[i:i + 1000])
    c.request("POST", "/v1/jobs", body, {"content-type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status in (200, 201), r.status
"""


_SUCCEEDED = "SELECT coalesce(sum(n), 0) FROM job_counts WHERE bucket = 'succeeded'"


def cpu_ticks(pid: int, children: bool = False) -> int:
    """utime + stime of ``pid`` (``children``: of its reaped children, cutime + cstime:
    for a spawn helper, the commands it started)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except OSError:
        return 0
    first = 13 if children else 11
    return int(fields[first]) + int(fields[first + 1])


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1]
            except OSError:
                continue
            if int(ppid) == pid and b"spawner" in (entry / "cmdline").read_bytes():
                out.append(int(entry.name))
    return out


class Daemon:
    def __init__(
        self,
        src: str,
        spawner: str,
        group: str | None,
        log_level: str = "warning",
        concurrency: int = 16,
    ) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bspawn-"))
        os.chmod(self.tmp, 0o755)
        self.sock = self.tmp / "run" / "j.sock"
        env = dict(os.environ, PYTHONPATH=src, JOBCTL_JOB_SPAWNER=spawner)
        env.pop("JOBCTL_SOCKET", None)
        cmd = [sys.executable, "-m", "jobctl", "daemon", "--db", str(self.tmp / "s" / "j.db"),
               "--socket", str(self.sock), "--concurrency", str(concurrency),
               "--log-level", log_level]  # fmt: skip
        if group:
            cmd += ["--socket-group", group]
        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
        sys.path.insert(0, src)
        from jobctl.client import Client

        deadline = time.monotonic() + 60
        while not self.sock.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("daemon did not start")
            time.sleep(0.05)
        self.client = Client(self.sock)
        self.client.status()

    def enqueue(self, jobs: list[dict[str, Any]], user: str | None) -> None:
        if user is None:
            for i in range(0, len(jobs), 1000):
                self.client.enqueue_many(jobs[i : i + 1000])
            return
        pw = pwd.getpwnam(user)
        subprocess.run(["/usr/bin/python3", "-c", _ENQUEUE_AS, str(self.sock)],
                       input=json.dumps(jobs), text=True, check=True, user=pw.pw_uid,
                       group=pw.pw_gid, extra_groups=[pw.pw_gid], cwd="/")  # fmt: skip

    def wait_succeeded(self, n: int, timeout: float | None = None) -> None:
        """Until ``n`` jobs succeeded, read from the store's file (read-only): asking the
        daemon's ``status`` every 50 ms cost it ~0.4 ms of CPU a call, 10-18% of the CPU
        per job measured (issue 17, branch spawnd2); the rates come from the attempts'
        times, not from when this loop notices."""
        # 900 s, or 20 jobs/s for big bursts: 200,000 under load took longer than 900 s
        deadline = time.monotonic() + (timeout or max(900.0, n / 20))
        db = sqlite3.connect(f"file:{self.tmp / 's' / 'j.db'}?mode=ro", uri=True)
        try:
            while db.execute(_SUCCEEDED).fetchone()[0] < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not all {n} succeeded: {self.client.status()['counts']}")
                time.sleep(0.05)
        finally:
            db.close()

    def times(self) -> list[tuple[float, float, float]]:
        """(run_at, started_at, finished_at) of every attempt, seconds (read-only)."""
        db = sqlite3.connect(f"file:{self.tmp / 's' / 'j.db'}?mode=ro", uri=True)
        rows = db.execute("SELECT j.run_at, a.started_at, a.finished_at FROM attempts a "
                          "JOIN jobs j ON j.id = a.job_id").fetchall()  # fmt: skip
        db.close()
        return [(r / 1000, s / 1000, f / 1000) for r, s, f in rows]

    def stop(self) -> None:
        """Stop the daemon; its files are removed at the bench's end (:func:`remove_left`),
        not here: on ext4 without a journal (this VM's disk) every file created within
        a minute after thousands were deleted nearby, up to six while their inode table
        blocks are dirty, costs a scan past them (``recently_deleted`` in the inode
        allocator), so the run after a removal paid up to 300 us more per attempt log than
        the run before it (branch spawnh3); :func:`wait_inodes_quiet` waits that out."""
        self.client.close()
        self.proc.terminate()
        self.proc.wait()
        LEFT.append(self.tmp)


#: Temporary directories of finished runs, removed when the bench ends.
LEFT: list[Path] = []
#: When a spawn bench last removed its runs' files (a number of seconds since the epoch).
REMOVED_STAMP = Path(tempfile.gettempdir()) / "jobctl-bench-spawn-removed"
#: Seconds an ext4 without a journal (this VM's root file system) keeps a freed inode
#: from reuse while its inode table block is dirty (fs/ext4/ialloc.c: RECENTCY_MIN 60 +
#: RECENTCY_DIRTY 300). Every file created meanwhile scans past such inodes, and new
#: files dirty those blocks again: a session-20 probe (30,000 files removed, then 500
#: files created now and then, `os.sync()` first) still paid 3-5x the quiet creation
#: cost 90 s later, and a run's helper 2.5-5x its quiet CPU per job.
INODE_QUIET = 360.0


def remove_left() -> None:
    """Remove the finished runs' directories and note when (:func:`wait_inodes_quiet`)."""
    removed = bool(LEFT)
    while LEFT:
        shutil.rmtree(LEFT.pop(), ignore_errors=True)
    if removed:  # a stamp another account left in /tmp must not cost the run its report
        with contextlib.suppress(OSError):
            REMOVED_STAMP.write_text(f"{time.time():.0f}\n")


def wait_inodes_quiet(wait: bool = True) -> float:
    """Seconds since a spawn bench last removed its files, after waiting (``wait``) until
    :data:`INODE_QUIET` have passed: a run in that window measures ext4's scan past the
    freed inodes in the helper's log creation, not jobctl (the first row of a bench used
    to pay it for the previous bench's removal)."""
    try:
        since = time.time() - float(REMOVED_STAMP.read_text())
    except (OSError, ValueError):
        return float("inf")
    if wait and since < INODE_QUIET:
        progress(
            f"waiting {INODE_QUIET - since:.0f} s: files were removed {since:.0f} s ago"
            " (ext4 without a journal scans past freed inodes for up to 6 minutes)"
        )
        time.sleep(INODE_QUIET - since)
        since = INODE_QUIET
    return since


class E2e(TypedDict):
    """N jobs due at once: jobs/s from due to the last finish, when the last one started,
    and the CPU per job of the daemon, of its spawn helper and of the commands the helper
    started (whatever they exec: the launcher, a trampoline, ``true``)."""

    rate: float
    started_s: float
    daemon_us_per_job: float
    helper_us_per_job: float
    commands_us_per_job: float


class LagMs(TypedDict):
    """Dispatch lag at light load: attempt start - run_at (ms)."""

    p50: float
    p99: float
    max: float


@dataclass
class SpawnRun:
    """One run of this bench, in the order the report prints it."""

    jobs: int
    burst: int
    lag_jobs: int
    load_start: tuple[float, float, float]
    raw: dict[str, float]
    #: "helper, own user", "inline, own user" (and "…, another user" as root)
    e2e: dict[str, E2e] = field(default_factory=dict)
    bursts: dict[str, E2e] = field(default_factory=dict)  # by spawner
    lags: dict[str, LagMs] = field(default_factory=dict)  # by spawner
    huey: float | None = None
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)


def jobs_due(n: int, due: datetime, command: list[str]) -> list[dict[str, Any]]:
    return [{"command": command, "cwd": "/", "run_at": due.isoformat()} for _ in range(n)]


def e2e(
    src: str,
    spawner: str,
    n: int,
    user: str | None,
    concurrency: int = 16,
    during: Callable[[Daemon, datetime], None] | None = None,
) -> E2e:
    """N `true` jobs due at once: jobs/s from due to the last finish, and CPU per job.
    ``during(daemon, due)``, if given, runs once the jobs are in (bench/spawn_sched.py
    records the scheduler there), before the wait for the last to succeed."""
    d = Daemon(src, spawner, user, concurrency=concurrency)
    try:
        lead = 2.0 + n / 5000
        due = datetime.now(UTC) + timedelta(seconds=lead)
        d.enqueue(jobs_due(n, due, ["true"]), user)
        helpers = children_of(d.proc.pid)

        def cpu() -> tuple[int, int, int]:
            return (cpu_ticks(d.proc.pid), sum(cpu_ticks(h) for h in helpers),
                    sum(cpu_ticks(h, True) for h in helpers))  # fmt: skip

        cpu0 = cpu()
        if during is not None:
            during(d, due)
        d.wait_succeeded(n)
        cpu1 = cpu()
        times = d.times()
        start = due.timestamp()
        last_start = max(s for _, s, _ in times)
        last_end = max(f for _, _, f in times)
        hz = os.sysconf("SC_CLK_TCK")
        return {
            "rate": n / (last_end - start),
            "started_s": last_start - start,
            "daemon_us_per_job": (cpu1[0] - cpu0[0]) / hz / n * 1e6,
            "helper_us_per_job": (cpu1[1] - cpu0[1]) / hz / n * 1e6,
            "commands_us_per_job": (cpu1[2] - cpu0[2]) / hz / n * 1e6,
        }
    finally:
        d.stop()


def lag(src: str, spawner: str, n: int) -> LagMs:
    """``n`` jobs due at instants spread over 2 s (light load): attempt start - run_at."""
    d = Daemon(src, spawner, None)
    try:
        t0 = datetime.now(UTC) + timedelta(seconds=1.5)
        at = [(t0 + timedelta(seconds=2 * i / n)).isoformat() for i in range(n)]
        jobs = [{"command": ["true"], "cwd": "/", "run_at": when} for when in at]
        d.enqueue(jobs, None)
        d.wait_succeeded(n)
        lags = sorted((s - r) * 1000 for r, s, _ in d.times())
        return {"p50": lags[len(lags) // 2], "p99": lags[int(len(lags) * 0.99)], "max": lags[-1]}
    finally:
        d.stop()


def huey_e2e(n: int) -> float | None:
    """huey: n tasks with one eta, 16 thread workers each running `true` (peer_huey)."""
    try:
        import peer_huey
    except ImportError:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="bspawn-huey-"))
    db = str(tmp / "huey.db")
    log = open(tmp / "consumer.log", "wb")  # noqa: SIM115
    consumer = subprocess.Popen([sys.executable, str(BENCH / "peer_huey.py"), "consumer", db,
                                 "16"], stdout=log, stderr=log, cwd=BENCH)  # fmt: skip
    try:
        h, tasks = peer_huey.make(db)
        eta = time.time() + 2.0 + n / 2000
        for _ in range(n):
            tasks.run_true.schedule(eta=peer_huey.eta(eta))
        deadline = time.monotonic() + 900
        while len(h.all_results()) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        results = peer_huey.results(h)
        last = max(f for _, f in results)
        return float(len(results) / (last - eta))
    finally:
        consumer.terminate()
        consumer.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def bench_user() -> str | None:
    """A temporary account for the other-user rows (root only); removed at exit."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        return None
    subprocess.run(["userdel", "-r", BENCH_USER], capture_output=True, check=False)
    subprocess.run(["useradd", "-M", "-U", BENCH_USER], check=True, capture_output=True)
    return BENCH_USER


def render(r: SpawnRun) -> str:
    """The report, every figure from ``r``: the lines this bench prints."""
    la, lz = r.load_start, r.load_end
    out = [f"load average at start {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}; {os.cpu_count()} CPUs"]
    out += [f"  raw  {name:55s} {rate:8.0f}/s" for name, rate in r.raw.items()]
    out += [
        f"  e2e  {key:26s} {e['rate']:7.0f} jobs/s; all started {e['started_s']:.2f} s "
        f"after due; CPU per job: daemon {e['daemon_us_per_job']:.0f} us, "
        f"helper {e['helper_us_per_job']:.0f} us, commands {e['commands_us_per_job']:.0f} us"
        for key, e in r.e2e.items()
    ]
    out += [
        f"  burst {r.burst} x true, {mode:7s}: fully started {b['started_s']:.1f} s "
        f"after due ({b['rate']:.0f} jobs/s)"
        for mode, b in r.bursts.items()
    ]
    out += [
        f"  lag  {mode:7s} {r.lag_jobs} jobs over 2 s: p50 {lg['p50']:.1f} ms, "
        f"p99 {lg['p99']:.1f} ms, max {lg['max']:.1f} ms"
        for mode, lg in r.lags.items()
    ]
    out += _ratios(r)
    out.append(
        f"load average at end {lz[0]:.2f} {lz[1]:.2f} {lz[2]:.2f} (figures under load: "
        "re-run on a quiet machine)"
    )
    return "\n".join(out)


def _ratios(r: SpawnRun) -> list[str]:
    ps = r.raw["posix_spawn, 16 in flight"]
    own = r.e2e["helper, own user"]["rate"]
    huey = r.huey
    out = [f"  huey e2e {r.jobs} x true: {huey:.0f} jobs/s" if huey else "  huey: not installed"]
    out.append(
        f"ratios: helper e2e / posix_spawn {own / ps:.2f} (target >= 0.75); "
        f"helper / inline e2e {own / r.e2e['inline, own user']['rate']:.2f}"
        + (f"; helper / huey {own / huey:.2f} (target >= 2)" if huey else "")
    )
    if "helper, another user" in r.e2e:
        other = r.e2e["helper, another user"]["rate"]
        inline = r.e2e["inline, another user"]["rate"]
        out.append(
            f"        another user: helper / inline {other / inline:.2f}; "
            f"helper / posix_spawn {other / ps:.2f}"
        )
    if r.bursts:
        ratio = r.bursts["inline"]["started_s"] / r.bursts["helper"]["started_s"]
        out.append(f"        burst fully started: inline / helper {ratio:.2f} (target >= 2)")
    return out


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--burst", type=int, default=0, help="also a burst of this many jobs")
    ap.add_argument("--lag", type=int, default=200)
    ap.add_argument("--raw", type=int, default=1000)
    ap.add_argument("--no-huey", action="store_true")
    ap.add_argument("--src", default=str(BENCH.parent / "src"))
    ap.add_argument("--ref-src", default=None, help="src tree of the burst's inline run")
    ap.add_argument(
        "--no-inode-wait",
        action="store_true",
        help="do not wait out ext4's window after a previous bench's removal",
    )
    a = ap.parse_args()
    wait_inodes_quiet(not a.no_inode_wait)
    run = SpawnRun(a.jobs, a.burst, a.lag, os.getloadavg(), bench_spawn.raw_rates(a.raw))
    progress(f"raw rates: {run.raw}")
    user = bench_user()
    try:
        for who in [None, user] if user else [None]:
            for mode in ("helper", "inline"):
                key = f"{mode}, {'another user' if who else 'own user'}"
                run.e2e[key] = e2e(a.src, mode, a.jobs, who)
                progress(f"e2e {key}: {run.e2e[key]}")
        if a.burst:
            for mode in ("helper", "inline"):
                src = a.ref_src if mode == "inline" and a.ref_src else a.src
                run.bursts[mode] = e2e(src, mode, a.burst, None)
                where = "" if src == a.src else f" ({src})"
                progress(f"burst {mode}: {run.bursts[mode]}{where}")
        for mode in ("helper", "inline"):
            run.lags[mode] = lag(a.src, mode, a.lag)
            progress(f"lag {mode}: {run.lags[mode]}")
        run.huey = None if a.no_huey else huey_e2e(a.jobs)
    finally:
        remove_left()
        if user:
            subprocess.run(["userdel", "-r", BENCH_USER], capture_output=True, check=False)
    run.load_end = os.getloadavg()
    print(render(run))


if __name__ == "__main__":
    main()

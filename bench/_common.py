"""Helpers shared by the benchmark scripts.

* :class:`UdsHttp`: a deliberately tiny HTTP/1.1 keep-alive client over a Unix socket.
  Requests are pre-encoded bytes and responses are parsed only as far as status and
  Content-Length, so a load-generating client costs a few microseconds of CPU per request
  and the numbers measure the daemon, not httpx (the clients share the 2 cores with it).
* statistics (percentiles, medians) and /proc readers (CPU time, RSS).
* :func:`run_clients`: start N client processes, release them together, collect results.
* :class:`Daemon` (a real ``jobctl daemon`` on temp paths), :func:`wait_quiet` (wait for
  the shared machine to calm down before a measurement) and the report helpers that write
  a script's section of docs/benchmarks.md (:func:`header`, :func:`write_section`, ...).
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import platform
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypedDict, TypeVar, final

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
#: The installed console script next to this interpreter (the venv's editable install).
JOBCTL_BIN = str(Path(sys.executable).parent / "jobctl")
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = BENCH_DIR / "results"  # raw results as JSON (git-ignored)
UTC = dt.UTC

_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- typed results ------------------------------------------------------------------


@final
class Failed(TypedDict):
    """A workload that raised: the reason, in place of its result."""

    error: str


class Rss(TypedDict):
    """A process's resident memory now and at its peak (VmHWM), in MB."""

    rss_mb: float
    hwm_mb: float


Result = TypeVar("Result", bound=Mapping[str, object])


def done(res: Result | Failed | None) -> Result | None:
    """A workload's result, or None when it failed or did not run."""
    if res is None or "error" in res:
        return None
    return res


def error_of(res: Mapping[str, object]) -> str | None:
    """Why a workload failed, or None if it did not."""
    error = res.get("error")
    return error if isinstance(error, str) else None


def failed(exc: BaseException, limit: int = 300) -> Failed:
    return {"error": f"{type(exc).__name__}: {exc}"[:limit]}


_T = TypeVar("_T")
_P = ParamSpec("_P")


def attempt(what: str, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T | Failed:
    """``fn(*args)``, or why it failed: one failing workload must not lose the others."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        log(f"{what} FAILED: {exc!r}")
        return failed(exc, 400)


class UdsHttp:
    """One keep-alive HTTP/1.1 connection to the daemon's Unix socket."""

    #: uvicorn closes a keep-alive connection after 5 s idle; reconnect before that
    #: instead of retrying a request (a retried POST could enqueue twice).
    IDLE_RECONNECT = 3.0

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path, self.timeout = str(path), timeout
        self._connect()

    def _connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)
        self.buf = b""
        self.used = time.monotonic()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if time.monotonic() - self.used > self.IDLE_RECONNECT:
            self.sock.close()
            self._connect()
        data = body or b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._recv()
        header, self.buf = self.buf[:end], self.buf[end + 4 :]
        status = int(header[9:12])
        length = None
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise RuntimeError("chunked responses are not supported by this bench client")
        if length is None:
            raise RuntimeError(f"response without Content-Length: {header[:200]!r}")
        while len(self.buf) < length:
            self._recv()
        payload, self.buf = self.buf[:length], self.buf[length:]
        self.used = time.monotonic()
        return status, payload

    def json(
        self, method: str, path: str, obj: Any = None, expect: Sequence[int] = (200, 201)
    ) -> Any:
        status, payload = self.request(
            method, path, None if obj is None else json.dumps(obj).encode()
        )
        if status not in expect:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {payload[:300]!r}")
        return json.loads(payload)

    def _recv(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


# -- statistics ---------------------------------------------------------------------


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


# -- /proc --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def proc_status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


# -- client processes ---------------------------------------------------------------


def run_clients(
    target: Callable[..., None], per_client_args: Sequence[tuple[Any, ...]], timeout: float = 600.0
) -> list[dict[str, Any]]:
    """Run ``target(*args, barrier, queue)`` in one spawned process per args tuple.

    Each client connects and warms up, then waits on the barrier; all start together.
    Returns the dicts the clients put on the queue (one each).
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(per_client_args))
    out: Any = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(*a, barrier, out), daemon=True) for a in per_client_args
    ]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(out.get(timeout=timeout))
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r["error"] for r in results if r.get("error")]
    if errors:
        raise RuntimeError("client failed: " + errors[0])
    return results


def jobctl_enqueue_client(
    sock: str, body: bytes, per_request: int, warmup: int, duration: float, barrier: Any, out: Any
) -> None:
    """POST ``body`` (one job or a batch of ``per_request``) until ``duration`` is over."""
    try:
        c = UdsHttp(sock)
        for _ in range(warmup):
            status, payload = c.request("POST", "/v1/jobs", body)
            if status != 201:
                raise RuntimeError(f"warm-up: HTTP {status}: {payload[:200]!r}")
        barrier.wait()
        t0 = time.time()
        end = t0 + duration
        n = errs = 0
        lat = []
        while True:
            s = time.time()
            if s >= end:
                break
            status, payload = c.request("POST", "/v1/jobs", body)
            lat.append(time.time() - s)
            if status == 201:
                n += per_request
            else:
                errs += 1
        out.put(
            {
                "jobs": n,
                "t0": t0,
                "last": time.time(),
                "lat": lat,
                "errors": errs,
                "warm_jobs": warmup * per_request,
            }
        )
        c.close()
    except BaseException as exc:  # reported to the parent, which raises
        out.put({"error": repr(exc)})


def jobctl_client_enqueue_client(
    sock: str, job: dict[str, Any], warmup: int, duration: float, barrier: Any, out: Any
) -> None:
    """Enqueue ``job`` through the shipped client (``jobctl.client.Client.enqueue``), one job
    per call, until ``duration`` is over: what a Python producer program pays."""
    try:
        from pathlib import Path

        from jobctl.client import Client

        c = Client(Path(sock))
        for _ in range(warmup):
            c.enqueue(job)
        barrier.wait()
        t0 = time.time()
        end = t0 + duration
        n = errs = 0
        lat = []
        cpu0 = time.process_time()
        while True:
            s = time.time()
            if s >= end:
                break
            try:
                c.enqueue(job)
                n += 1
            except Exception:
                errs += 1
            lat.append(time.time() - s)
        cpu = time.process_time() - cpu0
        out.put(
            {
                "jobs": n,
                "t0": t0,
                "last": time.time(),
                "lat": lat,
                "errors": errs,
                "warm_jobs": warmup,
                "client_cpu_us": 1e6 * cpu / max(1, n + errs),
            }
        )
        c.close()
    except BaseException as exc:  # reported to the parent, which raises
        out.put({"error": repr(exc)})


def huey_enqueue_client(db: str, warmup: int, duration: float, barrier: Any, out: Any) -> None:
    """Enqueue huey tasks (eta far in the future), one ``schedule()`` call per job."""
    try:
        import peer_huey

        _, tasks = peer_huey.make(db)
        eta = peer_huey.FAR_FUTURE
        for _ in range(warmup):
            tasks.noop.schedule(eta=eta)
        barrier.wait()
        t0 = time.time()
        end = t0 + duration
        n = errs = 0
        lat = []
        while True:
            s = time.time()
            if s >= end:
                break
            try:
                tasks.noop.schedule(eta=eta)
                n += 1
            except Exception:
                errs += 1
            lat.append(time.time() - s)
        out.put(
            {
                "jobs": n,
                "t0": t0,
                "last": time.time(),
                "lat": lat,
                "errors": errs,
                "warm_jobs": warmup,
            }
        )
    except BaseException as exc:
        out.put({"error": repr(exc)})


def huey_fill_client(
    db: str, kind: str, items: list[tuple[float, float]], barrier: Any, out: Any
) -> None:
    """Enqueue prepared huey tasks: ``items`` are (eta epoch seconds, arg) pairs."""
    try:
        import peer_huey

        _, tasks = peer_huey.make(db)
        barrier.wait()
        t0 = time.time()
        locked = 0
        for eta, arg in items:
            when = peer_huey.eta(eta)
            for _ in range(20):  # what a caller does when SQLite says "database is locked"
                try:
                    if kind == "true":
                        tasks.run_true.schedule(eta=when)
                    else:
                        tasks.lag.schedule(args=(arg,), eta=when)
                    break
                except Exception as exc:
                    if "locked" not in str(exc):
                        raise
                    locked += 1
            else:
                raise RuntimeError("huey enqueue still locked after 20 attempts")
        out.put({"t0": t0, "last": time.time(), "n": len(items), "locked": locked})
    except BaseException as exc:
        out.put({"error": repr(exc)})


# -- processes the benchmarks start, and their cleanup ------------------------------------


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


_PROCS: list[subprocess.Popen[bytes]] = []


def spawn(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """Start a process this bench owns: killed at exit if still running."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
    _PROCS.append(proc)
    return proc


def forget(proc: subprocess.Popen[bytes]) -> None:
    """A process that ended (or was reaped) elsewhere: no longer ours to clean up."""
    if proc in _PROCS:
        _PROCS.remove(proc)


def stop_proc(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    forget(proc)


def wait_ready(
    proc: subprocess.Popen[bytes], log_path: Path, stop: Callable[[], None], timeout: float = 120
) -> None:
    """Wait for a daemon's ``event=ready`` in its stderr log; on death or timeout call
    ``stop`` and raise with the log's tail (every harness starts daemons this way)."""
    deadline = time.time() + timeout
    while b"event=ready" not in log_path.read_bytes():
        if proc.poll() is not None or time.time() > deadline:
            tail = log_path.read_bytes()[-2000:].decode(errors="replace")
            stop()
            raise RuntimeError(f"daemon did not become ready:\n{tail}")
        time.sleep(0.02)


def kill_all() -> None:
    """Kill the processes this script started (and only those)."""
    for proc in list(_PROCS):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _PROCS.clear()


atexit.register(kill_all)


def on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that clean up


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


class Rows:
    """A results table's rows, and each target met or missed, in table order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.checks: list[tuple[str, bool]] = []

    def add(self, num: str, name: str, value: str, target: str, ok: bool | None) -> None:
        self.lines.append(f"| {num} | {name} | {value} | {target} | {verdict(ok)} |")
        if ok is not None:
            self.checks.append((f"{num} {name}", ok))


def section(
    marks: tuple[str, str],
    title: str,
    info: dict[str, str],
    elapsed: float,
    cmd: str,
    rows: Rows,
    notes: list[str],
) -> str:
    """A bench's section of docs/benchmarks.md: between its markers, the heading, the run's
    header, the command, the results table and the notes."""
    lines = [
        marks[0],
        "",
        f"## {title}",
        "",
        header(info, elapsed),
        "",
        f"Command: `{cmd}`",
        "",
        "| # | workload | result | target | verdict |",
        "|---|---|---:|---|---|",
        *rows.lines,
        "",
        *notes,
        "",
        marks[1],
    ]
    return "\n".join(lines)


def git_state() -> str | None:
    """``working tree at REV`` (and whether src/ has uncommitted changes), or None
    where git cannot say."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except Exception:
        return None
    return f"working tree at {rev}" + (" with uncommitted changes in src/" if dirty else "")


def source_info() -> str:
    """What was measured: the working tree the venv's editable install points at."""
    import jobctl

    where = Path(jobctl.__file__).resolve().parent
    state = git_state()
    if state is None:
        return f"working tree ({where})"
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    return state + f" (jobctl {jobctl.__version__} imported from {shown})"


def machine() -> dict[str, str]:
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1024 / 1024
    versions = []
    for mod in ("uvicorn", "fastapi", "uvloop"):
        try:
            from importlib.metadata import version

            versions.append(f"{mod} {version(mod)}")
        except Exception:
            pass
    return {
        "date": dt.datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": model,
        "mem": f"{mem:.0f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "libs": ", ".join(versions),
        "jobctl": source_info(),
    }


def machine_line(info: dict[str, str]) -> str:
    return (
        f"Run on {info['date']}: {info['nproc']} CPUs ({info['cpu']}), {info['mem']} RAM, "
        f"Linux {info['kernel']}, Python {info['python']}, SQLite {info['sqlite']}, "
        f"{info['libs']}; jobctl: {info['jobctl']}. Temp files on the root disk (real "
        f"fsync)."
        + (f" PostgreSQL on this machine: {info['postgres']}." if "postgres" in info else "")
    )


def background_line() -> str:
    if not BACKGROUND:
        return ""
    return (
        f"CPU used by other processes just before each measurement (other engineers' "
        f"tests and benchmarks share this machine): median {median(BACKGROUND):.2f}, "
        f"max {max(BACKGROUND):.2f} cores."
    )


def header(info: dict[str, str], elapsed: float) -> str:
    return " ".join(
        x
        for x in (
            machine_line(info),
            background_line(),
            f"Total bench time {elapsed / 60:.1f} min.",
        )
        if x
    )


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**PASS**" if ok else "**MISS**")


def write_section(marks: tuple[str, str], section: str) -> None:
    """Replace this script's marked section of docs/benchmarks.md, keeping the rest.

    One read-modify-write right away (other scripts write their own sections)."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = (
        DOC.read_text()
        if DOC.exists()
        else (
            "# Benchmarks\n\nHow fast jobctl is, measured by the scripts in `bench/`; each "
            "script rewrites only its own section (between its markers).\n"
        )
    )
    start, end = marks
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


#: A script's report: (results, sizes, command, machine, elapsed) -> (section, checks).
SizesT = TypeVar("SizesT")
#: A script's one renderer: (typed results, sizes, command, machine, elapsed) ->
#: (its section of docs/benchmarks.md, each target with whether it was met).
Report = Callable[[Result, SizesT, str, dict[str, str], float], tuple[str, list[tuple[str, bool]]]]


def render_saved(
    path: str,
    report: Report[Result, SizesT],
    sizes: Callable[..., SizesT],
    marks: tuple[str, str],
    write: bool,
) -> None:
    """``--from-json``: print (and unless ``write`` is false, write) the report of a saved
    result file again, without running anything."""
    saved = json.loads(Path(path).read_text())
    BACKGROUND[:] = saved["background"]
    section, _ = report(
        saved["results"],
        sizes(**saved["sizes"]),
        saved["command"],
        saved["machine"],
        saved["elapsed"],
    )
    print(section)
    if write:
        write_section(marks, section)


def conclude(
    script: str,
    R: Result,
    sz: SizesT,
    info: dict[str, str],
    elapsed: float,
    report: Report[Result, SizesT],
    marks: tuple[str, str],
    write: bool,
) -> None:
    """After the runs: keep the raw results, print the report and each target met or
    missed, and (unless ``write`` is false) write the script's section of the doc."""
    cmd = f"python bench/{script}.py" + "".join(f" {a}" for a in sys.argv[1:])
    saved = save_json(
        script,
        {
            "results": R,
            "sizes": sz.__dict__,
            "command": cmd,
            "machine": info,
            "elapsed": elapsed,
            "background": BACKGROUND,
        },
    )
    log(f"raw results in {saved}")
    section, checks = report(R, sz, cmd, info, elapsed)
    print(section)
    print("\nTargets:")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'MISS'}  {name}")
    bad = [k for k, v in R.items() if isinstance(v, dict) and v.get("verified") is False]
    if bad:
        print("  WARNING: verification failed for " + ", ".join(bad))
    if write:
        write_section(marks, section)
        log(f"wrote {DOC}")


def save_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(payload, default=str, indent=1))
    return path


def fmt(x: Any, digits: int = 0) -> str:
    """A number for a report table: thousands separated; missing or NaN as "n/a", text as is."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"

"""The base of the benchmark helpers: paths, typed results, statistics, /proc readers,
and the processes a bench starts (killed at exit)."""

import atexit
import datetime as dt
import math
import os
import signal
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

"""Starting, watching and stopping one command's process group.

Each attempt runs as the leader of a new session (so of a new process group): stdin is
``/dev/null``, stdout and stderr go straight to the attempt's log file (the daemon never
copies output through itself). The exit is watched through a pidfd on the event loop,
so thousands of running commands need no threads. Stopping a job means signalling its
whole group: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from jobctl.domain.models import Claim
from jobctl.domain.schedule import nominal_text

TAIL_BYTES = 4096
_PATH = "/usr/local/bin:/usr/bin:/bin"
_ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Running:
    """A live attempt: its process, exit future and why we stopped it (if we did)."""

    claim: Claim
    proc: subprocess.Popen[bytes]
    exited: asyncio.Future[int]
    log_path: Path
    #: The process's start time (pid-reuse guard), read on a thread; see :func:`spawn`.
    start_time: asyncio.Future[int | None] = field(repr=False)
    stop_reason: str | None = None
    stopping: asyncio.Task[None] | None = field(default=None, repr=False)
    #: The output cap in bytes (the ``log_bytes`` quota, rounded up to 512), or None.
    log_cap: int | None = None


@cache
def _account(uid: int) -> tuple[str, str, str, int]:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return (str(uid), "/", "/bin/sh", uid)
    return (pw.pw_name, pw.pw_dir or "/", pw.pw_shell or "/bin/sh", pw.pw_gid)


def command_env(claim: Claim, lease_owner: str) -> dict[str, str]:
    """The small clean environment a command gets (never the daemon's own).

    Documented in docs/guarantees.md; the ``JOBCTL_*`` names let commands make their side
    effects idempotent and let a restarted daemon find a survivor by its environment.
    """
    job = claim.job
    name, home, shell, _ = _account(job.spec.owner_uid)
    env = {
        "PATH": _ROOT_PATH if job.spec.owner_uid == 0 else _PATH,
        "HOME": home,
        "USER": name,
        "LOGNAME": name,
        "SHELL": shell,
        "LANG": "C.UTF-8",
    }
    env.update(dict(job.spec.env))
    env.update(
        {
            "JOBCTL_JOB_ID": str(job.id),
            "JOBCTL_JOB_KEY": job.key,
            "JOBCTL_ATTEMPT": str(claim.attempt),
            "JOBCTL_GENERATION": str(claim.generation),
            "JOBCTL_QUEUE": job.spec.queue,
            "JOBCTL_LEASE_OWNER": lease_owner,
        }
    )
    if job.spec.schedule_id is not None:
        env["JOBCTL_SCHEDULE_ID"] = job.spec.schedule_id
        if job.spec.scheduled_for is not None:
            env["JOBCTL_SCHEDULED_FOR"] = nominal_text(job.spec.scheduled_for)
    return env


#: Sets the file-size limit (512-byte blocks, as ``ulimit -f`` counts in POSIX sh), ignores
#: SIGXFSZ (so a write past it fails with EFBIG instead of killing the command), then
#: execs the command: both survive the exec.
_CAP = 'ulimit -f "$0" && trap "" XFSZ && exec "$@"'


def capped(argv: list[str], cap: int | None) -> tuple[list[str], int | None]:
    """The argv that runs ``argv`` with its output capped at ``cap`` bytes, and the cap.

    The command writes its log itself (the daemon never copies output), so the honest
    bound is the kernel's: ``RLIMIT_FSIZE`` set in the child before the exec. Python can
    only set it there through ``preexec_fn``, which forces a full ``fork`` of the daemon
    (measured: ~23 ms a spawn at 200 MB RSS instead of ~1 ms); ``/bin/sh`` setting it and
    exec'ing the command costs one more exec (~0.3 ms). The limit is per file, so it
    also bounds any single file the command writes.
    """
    if cap is None:
        return argv, None
    blocks = max(1, -(-cap // 512))
    return ["/bin/sh", "-c", _CAP, str(blocks), *argv], blocks * 512


#: Appended to an attempt's output tail when its log reached the cap; ``show`` looks for it.
CUT_MARK = "[jobctl: output cut at "


def cut_note(cap: int) -> str:
    return f"{CUT_MARK}{cap} bytes by the log_bytes quota; the last output follows]\n"


def output_cut(run: Running) -> bool:
    """Whether the attempt's log reached its cap (later writes failed: output was cut)."""
    if run.log_cap is None:
        return False
    try:
        return os.stat(run.log_path).st_size >= run.log_cap
    except OSError:
        return False


def spawn(
    claim: Claim,
    log_path: Path,
    lease_owner: str,
    loop: asyncio.AbstractEventLoop,
    log_fd: int,
    log_cap: int | None = None,
) -> Running:
    """Start the claim's command; raises OSError when it cannot be started at all.

    ``log_fd``: the log opened with :func:`open_log` (closed here in any case).
    ``log_cap``: bytes of output the command may write (see :func:`capped`).
    """
    try:
        proc, cap = _popen(claim, lease_owner, log_fd, log_cap)
    finally:
        os.close(log_fd)
    exited: asyncio.Future[int] = loop.create_future()
    # Reading /proc/PID/stat right after the fork can wait on the child's exec (a sixth
    # of the event loop's time per job in profiles), so it runs on a thread; the exit
    # watcher does not reap the child before it is read, so the pid cannot be reused.
    start = asyncio.wrap_future(_START_READER.submit(process_start_time, proc.pid), loop=loop)
    _watch_exit(proc, exited, loop, start)
    return Running(claim, proc, exited, log_path, start, log_cap=cap)


def _popen(
    claim: Claim, lease_owner: str, out: int, log_cap: int | None
) -> tuple[subprocess.Popen[bytes], int | None]:
    spec = claim.job.spec
    argv, cap = capped(list(spec.command), log_cap)
    creds: dict[str, object] = {}
    if os.geteuid() == 0 and spec.owner_uid != 0:
        # A root daemon runs each command as the user who submitted it, never as root.
        name, _, _, gid = _account(spec.owner_uid)
        creds = {"user": spec.owner_uid, "group": gid, "extra_groups": os.getgrouplist(name, gid)}
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        argv,
        stdin=_devnull(),
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=spec.cwd,
        env=command_env(claim, lease_owner),
        start_new_session=True,
        close_fds=True,
        **creds,  # type: ignore[call-overload]
    )
    return proc, cap


async def open_log_off_loop(path: Path) -> int:
    """:func:`open_log` on the loop's default thread pool (never leaks the descriptor,
    even when the waiting task is cancelled)."""
    fut = asyncio.get_running_loop().run_in_executor(None, open_log, path)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(_close_result)
        raise


def _close_result(fut: asyncio.Future[int]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        os.close(fut.result())


#: One thread reads start times: they are quick unless the child is mid-exec.
_START_READER = ThreadPoolExecutor(1, thread_name_prefix="jobctl-procstat")


@cache
def _devnull() -> int:
    """One read-only ``/dev/null`` for every command's stdin (Popen would open one each)."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


_made_dirs: set[Path] = set()
_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


def open_log(path: Path) -> int:
    """Open (create) the attempt's log for appending; returns the descriptor.

    Its directory is created once per daemon (and again if it was removed meanwhile),
    not with one ``mkdir`` per job. Creating the file is the expensive part (a few
    hundred µs of kernel time on some filesystems), so the executor calls this on a
    thread, off the event loop.
    """
    parent = path.parent
    if parent not in _made_dirs:
        parent.mkdir(parents=True, exist_ok=True)
        _made_dirs.add(parent)
    try:
        return os.open(path, _LOG_FLAGS, 0o666)
    except FileNotFoundError:
        parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, _LOG_FLAGS, 0o666)


def _watch_exit(
    proc: subprocess.Popen[bytes],
    exited: asyncio.Future[int],
    loop: asyncio.AbstractEventLoop,
    start: asyncio.Future[int | None],
) -> None:
    pidfd = os.pidfd_open(proc.pid)

    def reap(_: object = None) -> None:
        code = proc.wait()
        if not exited.done():
            exited.set_result(code)

    def on_exit() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        if start.done():
            reap()
        else:  # a zombie keeps its pid (and /proc entry) until reaped: read first
            start.add_done_callback(reap)

    loop.add_reader(pidfd, on_exit)


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


async def stop_group(run: Running, grace: float) -> None:
    """SIGTERM the attempt's group, SIGKILL it if the leader outlives ``grace``."""
    signal_group(run.proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(run.exited), grace)
    except TimeoutError:
        signal_group(run.proc.pid, signal.SIGKILL)
        await run.exited


def read_tail(path: Path, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of the log (raw descriptor calls: most logs are empty)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        end = os.fstat(fd).st_size
        data = os.pread(fd, size, max(0, end - size)) if end else b""
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat).

    Together with the pid it names one process for good: a recycled pid has another
    start time, so a restarted daemon never signals an innocent process.
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(stat.rsplit(b")", 1)[1].split()[19])


def find_by_env(markers: dict[str, str]) -> list[int]:
    """Pids of processes whose start-up environment holds all ``markers``.

    Used after a crash to find a command whose pid was never recorded (the daemon died
    between spawning it and committing the pid), or a child that left its group.
    """
    wanted = [f"{k}={v}".encode() for k, v in markers.items()]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            env = (entry / "environ").read_bytes().split(b"\0")
            if all(w in env for w in wanted):
                found.append(int(entry.name))
    return found

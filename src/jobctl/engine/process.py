"""Starting, watching and stopping one command's process group.

Each attempt runs as the leader of a new session (so of a new process group): stdin is
``/dev/null``, stdout and stderr go straight to the attempt's log file (the daemon never
copies output through itself). The exit is watched through a pidfd on the event loop,
so thousands of running commands need no threads. Stopping a job means signalling its
whole group: SIGTERM, then SIGKILL after a grace period; and its whole tree, processes
that left the group too (``setsid``, a double fork): through the attempt's cgroup where
the daemon may make one (engine/cgroup.py; the command is held at a gate, reading its
stdin, until it is in it), else by the ``JOBCTL_*`` markers in their environment
(:func:`find_by_env`, the evidence crash recovery uses too).

A root daemon runs each command as its owner: the child drops privileges (group, the
owner's supplementary groups, then uid) and only then enters the job's directory, as
the owner, through a tiny ``/bin/sh`` trampoline (engine/commandline.py): Popen itself
would ``chdir`` *before* dropping privileges, so a directory the owner cannot enter
would be entered anyway. The trampoline also gives the command back the open-file
limit the daemon started with (the daemon raises its own, see :class:`Launch`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import signal
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol

from jobctl import files
from jobctl.domain.models import Claim
from jobctl.domain.resources import Resources
from jobctl.domain.states import StopReason
from jobctl.engine import cgroup, limits
from jobctl.engine.cgroup import Cgroup, Cgroups
from jobctl.engine.commandline import (
    CWD_FAILED,
    GATE_SHUT,
    TRAMPOLINE,
    CommandLine,
    attempt_markers,
    command_env,
    command_line,
    cwd_failure,
    gate_shut,
    trampoline,
)
from jobctl.engine.procfs import find_by_env, has_markers, process_start_time

#: Re-exported: callers (recovery, proctree, spawnclient, results) know these as process.*.
__all__ = [
    "CWD_FAILED",
    "GATE_SHUT",
    "TRAMPOLINE",
    "CommandLine",
    "attempt_markers",
    "command_env",
    "command_line",
    "cwd_failure",
    "find_by_env",
    "gate_shut",
    "has_markers",
    "process_start_time",
    "trampoline",
]

TAIL_BYTES = 4096
_log = logging.getLogger("jobctl.executor")


class Child(Protocol):
    """A started command: a Popen, or the spawn helper's answer (engine/spawnclient.py)."""

    @property
    def pid(self) -> int: ...


@dataclass
class Running:
    """A live attempt: its process, exit future and why we stopped it (if we did)."""

    claim: Claim
    #: The command's process (its pid leads its session and process group).
    proc: Child
    exited: asyncio.Future[int]
    #: A string on the spawn helper's path (issue 17: a Path per attempt cost ~2% of the
    #: daemon's loop); whatever it is, ``open`` and ``os.stat`` take it.
    log_path: str | Path
    #: The process's start time (pid-reuse guard), read on a thread; see :func:`spawn`.
    start_time: asyncio.Future[int | None] = field(repr=False)
    stop_reason: StopReason | None = None
    #: What the attempt's error says when it ends cancelled (see ``Executor.stop``).
    stop_detail: str = ""
    stopping: asyncio.Task[None] | None = field(default=None, repr=False)
    #: The output cap in bytes (the ``log_bytes`` quota, rounded up to 512), or None.
    log_cap: int | None = None
    #: The attempt's cgroup (its whole tree), or None: then its tree is found by
    #: :attr:`markers` in ``/proc``.
    cgroup: Cgroup | None = None
    #: Done when the command is in :attr:`cgroup` (True) or could not be moved (False).
    entered: asyncio.Future[bool] | None = field(default=None, repr=False)
    markers: dict[str, str] = field(default_factory=dict)
    #: Bytes cut from the middle of the log so far (engine/logcap.py).
    cut_bytes: int = 0
    #: The log cannot be cut here (too small a cap, or the filesystem cannot).
    trim_off: bool = False

    async def tree_cgroup(self) -> Cgroup | None:
        """The cgroup that holds the attempt's tree, once the command is in it; None if
        there is none (the tree is found by :attr:`markers`)."""
        if self.cgroup is None or self.entered is None:
            return self.cgroup
        return self.cgroup if await asyncio.shield(self.entered) else None


#: Errors that say the host (or the owner) is out of a resource for now, not that the
#: command is broken: an attempt that meets one at start is retried later, for free.
TRANSIENT_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT}
)


@dataclass(frozen=True)
class Launch:
    """How commands are started, the same for every attempt of this daemon.

    ``umask``: the commands' file mode mask (``job_umask``). ``nofile``: the open-file
    soft limit commands get back when the daemon raised its own (:func:`raise_nofile`);
    None when it did not.
    """

    umask: int = 0o077
    nofile: int | None = None


def raise_nofile() -> tuple[int, int]:
    """Raise this process's open-file soft limit to its hard limit (idle connections and
    running commands hold descriptors; a daemon at 1,024 runs out). Returns the old and
    the new soft limit; commands get the old one back (:class:`Launch`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= soft:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, hard


def is_transient(exc: OSError) -> bool:
    """Whether starting failed only for want of a resource (descriptors, memory, disk)."""
    return exc.errno in TRANSIENT_ERRNOS


#: Appended to an attempt's output tail when its log reached the cap; ``show`` looks for it.
CUT_MARK = "[jobctl: output cut at "


def cut_note(cap: int, cut: int = 0) -> str:
    if cut:
        return (
            f"{CUT_MARK}{cap} bytes by the log_bytes quota: {cut} bytes from the middle "
            "dropped; the last output follows]\n"
        )
    return f"{CUT_MARK}{cap} bytes by the log_bytes quota; the last output follows]\n"


def log_cut_note(cap: int) -> bytes:
    """The line appended to a log that reached its cap, so the log itself says so."""
    return (
        f"\n{CUT_MARK}{cap} bytes by the log_bytes quota; what the command wrote after "
        "that was dropped]\n"
    ).encode()


def mark_cut(run: Running) -> None:
    """Append :func:`log_cut_note` to the attempt's log (the command's ``RLIMIT_FSIZE``
    does not bind the daemon). Best effort: a full disk leaves the log as it is, and
    ``show`` still says the output was cut."""
    if run.log_cap is None:
        return
    try:
        with open(run.log_path, "ab") as log:
            log.write(log_cut_note(run.log_cap))
    except OSError as exc:
        _log.warning("event=cut_note_failed job=%s error=%s", run.claim.job.id, exc)


def log_size(run: Running) -> int:
    """Bytes in the attempt's log file now (0 if it is gone): what ``status`` accounts."""
    try:
        return os.stat(run.log_path).st_size
    except OSError:
        return 0


def output_cut(run: Running, size: int | None = None) -> bool:
    """Whether the attempt's log reached its cap (later writes failed: output was cut);
    ``size``: the log's, known already."""
    if run.log_cap is None:
        return False
    if size is not None:
        return size >= run.log_cap
    try:
        return os.stat(run.log_path).st_size >= run.log_cap
    except OSError:
        return False


def log_end(run: Running) -> tuple[str, int]:
    """The last :data:`TAIL_BYTES` of the attempt's log and its size, once it ended: as
    the spawn helper read them at the exit (issue 17: nothing read here), unless the
    daemon cut the log's middle (engine/logcap.py) or the helper could not; else now."""
    seen: tuple[int, bytes] | None = getattr(run.proc, "log_end", None)
    if seen is not None and not run.cut_bytes:
        return seen[1].decode("utf-8", errors="replace"), seen[0]
    return read_tail(run.log_path), log_size(run)


def spawn(
    claim: Claim,
    log_path: Path,
    lease_owner: str,
    loop: asyncio.AbstractEventLoop,
    log_fd: int,
    launch: Launch | None = None,
    log_cap: int | None = None,
    cgroups: Cgroups | None = None,
) -> Running:
    """Start the claim's command; raises OSError when it cannot be started at all.

    ``log_fd``: the log opened with :func:`open_log` (closed here in any case).
    ``log_cap``: bytes of output the command may write (the ``log_bytes`` quota).
    ``cgroups``: where to make the attempt's cgroup; None: its tree is found in /proc.
    """
    blocks = None if log_cap is None else max(1, -(-log_cap // 512))
    res = claim.job.spec.resources
    try:
        limits.check(res, cgroups)
        cg = None if cgroups is None else limited_cgroup(cgroups, claim, lease_owner)
    except BaseException:
        os.close(log_fd)
        raise
    gate: tuple[int, int] | tuple[()] = ()
    try:
        if cg is not None or limits.needs_gate(res):
            gate = os.pipe2(os.O_CLOEXEC)
        proc = _popen(claim, lease_owner, log_fd, launch or Launch(), blocks, gate)
    except BaseException:
        if cg is not None:
            cg.remove()
        for fd in gate:
            os.close(fd)
        raise
    finally:
        os.close(log_fd)
    moved = _through_gate(proc, cg, gate, res) if gate else None
    exited, start = _watched(proc, loop, cg, moved)
    cap = None if blocks is None else blocks * 512
    markers = attempt_markers(claim.job.id, lease_owner, claim.generation)
    entered = None if moved is None else asyncio.wrap_future(moved, loop=loop)
    return Running(
        claim, proc, exited, log_path, start, log_cap=cap, cgroup=cg, entered=entered,
        markers=markers,
    )  # fmt: skip


def _through_gate(
    proc: subprocess.Popen[bytes], cg: Cgroup | None, gate: tuple[int, int], res: Resources | None
) -> Future[bool] | None:
    """Let the command, waiting at its gate, go on once its niceness is set and it is in
    its cgroup (:func:`limits.release`: the move mostly on a thread, whose future says
    whether it got there; None without a cgroup). A niceness that cannot be set
    (``StartRefused``): the command was stopped before it ran; it is reaped, its cgroup
    removed, and the refusal raised."""
    os.close(gate[0])
    try:
        return limits.release(cg, proc.pid, gate[1], res)
    except limits.StartRefused:
        proc.wait()
        if cg is not None:
            cg.remove()
        raise


def _watched(
    proc: subprocess.Popen[bytes],
    loop: asyncio.AbstractEventLoop,
    cg: Cgroup | None,
    moved: Future[bool] | None,
) -> tuple[asyncio.Future[int], asyncio.Future[int | None]]:
    """The command's exit future (a pidfd watch) and its start time's (read on a thread:
    reading /proc/PID/stat right after the fork can wait on the child's exec, a sixth of
    the event loop's time per job in profiles; the exit watcher does not reap the child
    before it is read, so the pid cannot be reused). No descriptor for the pidfd: the
    command is stopped now (with its cgroup, if it got there) and the OSError raised; the
    attempt is retried later."""
    exited: asyncio.Future[int] = loop.create_future()
    start = asyncio.wrap_future(_START_READER.submit(process_start_time, proc.pid), loop=loop)
    try:
        _watch_exit(proc, exited, loop, start)
    except OSError:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        if cg is not None and moved is not None and moved.result():
            cg.kill()
            cg.remove()
        raise
    return exited, start


def limited_cgroup(cgroups: Cgroups, claim: Claim, lease_owner: str) -> Cgroup | None:
    """The attempt's cgroup with the job's limits written (raises StartRefused when the
    job has cgroup limits that cannot be set; None: no cgroup, the tree is found in /proc)."""
    res = claim.job.spec.resources
    cg = make_cgroup(cgroups, claim, lease_owner)
    if res and res.cgroup_files():
        if cg is None:
            raise limits.StartRefused("cannot make the attempt's cgroup for its limits")
        try:
            limits.limit_cgroup(cg, res)
        except limits.StartRefused:
            cg.remove()
            raise
    return cg


def make_cgroup(cgroups: Cgroups | None, claim: Claim, lease_owner: str) -> Cgroup | None:
    if cgroups is None:
        return None
    try:
        return cgroups.create(cgroup.attempt_name(lease_owner, claim.job.id, claim.generation))
    except OSError as exc:  # the /proc scan still finds its tree
        _log.warning("event=cgroup_failed job=%s error=%s", claim.job.id, exc)
        return None


def _popen(
    claim: Claim,
    lease_owner: str,
    out: int,
    launch: Launch,
    blocks: int | None,
    gate: tuple[int, int] | tuple[()] = (),
) -> subprocess.Popen[bytes]:
    argv, env, cwd, creds = command_line(claim, lease_owner, launch.nofile, blocks, bool(gate))
    drop: dict[str, object] = {}
    if creds is not None:
        drop = {"user": creds[0], "group": creds[1], "extra_groups": creds[2]}
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        argv,
        stdin=gate[0] if gate else _devnull(),
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
        umask=launch.umask,
        **drop,  # type: ignore[call-overload]
    )
    return proc


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
_LOG_FLAGS = os.O_WRONLY | os.O_APPEND


def open_log(path: Path) -> int:
    """Open (create, 0600) the attempt's log for appending; returns the descriptor.

    Its directory is created (0700, never through a symlink) once per daemon, and again
    if it was removed meanwhile, not with one ``mkdir`` per job. Creating the file is
    the expensive part (a few hundred µs of kernel time on some filesystems), so the
    executor calls this on a thread, off the event loop.
    """
    parent = path.parent
    if parent not in _made_dirs:
        files.ensure_dir(parent)
        _made_dirs.add(parent)
    try:
        return files.open_private(path, _LOG_FLAGS)
    except FileNotFoundError:
        files.ensure_dir(parent)
        return files.open_private(path, _LOG_FLAGS)


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


def read_tail(path: str | Path, size: int = TAIL_BYTES) -> str:
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

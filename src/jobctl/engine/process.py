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
the owner, through a tiny ``/bin/sh`` trampoline (:data:`TRAMPOLINE`): Popen itself
would ``chdir`` *before* dropping privileges, so a directory the owner cannot enter
would be entered anyway. The trampoline also gives the command back the open-file
limit the daemon started with (the daemon raises its own, see :class:`Launch`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import pwd
import resource
import signal
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol

from jobctl import files
from jobctl.domain import jobenv
from jobctl.domain.models import Claim
from jobctl.domain.schedule import nominal_text
from jobctl.domain.states import StopReason
from jobctl.engine import cgroup, limits
from jobctl.engine.cgroup import Cgroup, Cgroups
from jobctl.engine.launcher import argv as launcher_argv
from jobctl.engine.procfs import find_by_env, has_markers, process_start_time

#: Re-exported: callers (recovery, proctree, spawnclient) know these as process.*.
__all__ = ["find_by_env", "has_markers", "process_start_time"]

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

#: Run by ``/bin/sh -c`` *after* the privilege drop: ``$6`` non-empty: first wait at the
#: gate (stdin, a pipe) for the line the daemon or the spawn helper writes once the shell
#: is in its cgroup (a gate closed without it: whoever held it died, so the command does
#: not run, see :data:`GATE_SHUT`), and take ``/dev/null`` as stdin; ``$1`` the open-file
#: soft limit to
#: give back (empty: leave it), ``$2`` the working directory, ``$3``/``$4`` ``=VALUE`` of
#: the job's own ``OLDPWD``/``PWD`` or empty (the shell sets both on ``cd``; they are put
#: back as the job gave them, so the command's environment is exactly the job's), then
#: ``$5`` the output cap in 512-byte blocks or empty (``RLIMIT_FSIZE``, with SIGXFSZ
#: ignored so a write past it fails with EFBIG instead of killing the command: the
#: ``log_bytes`` quota), then the command. A directory the owner cannot enter ends it with
#: :data:`CWD_FAILED`.
TRAMPOLINE = (
    '[ -z "$6" ] || { read -r _ || { echo "jobctl: the gate was never opened" >&2; '
    "exit 125; }; exec </dev/null; }; "
    '[ -z "$1" ] || ulimit -S -n "$1" 2>/dev/null; '
    'cd -P -- "$2" 2>/dev/null || { echo "jobctl: cannot enter the working directory" >&2; '
    "exit 125; }; "
    "case $3 in =*) OLDPWD=${3#=} ;; *) unset OLDPWD ;; esac; "
    "case $4 in =*) PWD=${4#=} ;; *) unset PWD ;; esac; "
    '[ -z "$5" ] || { ulimit -f "$5" 2>/dev/null; trap "" XFSZ; }; '
    'shift 6; exec "$@"'
)
#: What the trampoline leaves in the log (and its exit status) when ``cd`` failed.
CWD_FAILED = (125, b"jobctl: cannot enter the working directory\n")
#: What it leaves when its gate was closed without the line that lets it go: the helper
#: (or the inline daemon) died before the command was in its cgroup with its limits set;
#: the command never ran, so the attempt is retried for free (:func:`gate_shut`).
GATE_SHUT = (125, b"jobctl: the gate was never opened\n")


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


def _account(uid: int) -> tuple[str, str, str, int]:
    """The owner's name, home, shell and group; a failed lookup is not remembered (it may
    have failed for want of descriptors), a found one is."""
    found = _ACCOUNTS.get(uid)
    if found is not None:
        return found
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return (str(uid), "/", "/bin/sh", uid)
    found = (pw.pw_name, pw.pw_dir or "/", pw.pw_shell or "/bin/sh", pw.pw_gid)
    _ACCOUNTS[uid] = found
    return found


_ACCOUNTS: dict[int, tuple[str, str, str, int]] = {}


def attempt_markers(job_id: int, lease_owner: str, generation: int | None = None) -> dict[str, str]:
    """The environment entries that mark a process as the attempt's (the job's, of that
    daemon, at that generation when given), wherever it went: see :func:`find_by_env`."""
    markers = {"JOBCTL_JOB_ID": str(job_id), "JOBCTL_LEASE_OWNER": lease_owner}
    if generation is not None:
        markers["JOBCTL_GENERATION"] = str(generation)
    return markers


def command_env(claim: Claim, lease_owner: str) -> dict[str, str]:
    """The small clean environment a command gets (never the daemon's own).

    Documented in docs/guarantees.md; the ``JOBCTL_*`` names let commands make their side
    effects idempotent and let a restarted daemon find a survivor by its environment.
    """
    job = claim.job
    name, home, shell, _ = _account(job.spec.owner_uid)
    env = {
        "PATH": jobenv.default_path(job.spec.owner_uid),
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
    moved: Future[bool] | None = None
    if gate:
        os.close(gate[0])
        # The command waits at the gate until its niceness is set and it is in its cgroup
        # (the move mostly on a thread).
        try:
            moved = limits.release(cg, proc.pid, gate[1], res)
        except limits.StartRefused:
            proc.wait()
            if cg is not None:
                cg.remove()
            raise
    exited: asyncio.Future[int] = loop.create_future()
    # Reading /proc/PID/stat right after the fork can wait on the child's exec (a sixth
    # of the event loop's time per job in profiles), so it runs on a thread; the exit
    # watcher does not reap the child before it is read, so the pid cannot be reused.
    start = asyncio.wrap_future(_START_READER.submit(process_start_time, proc.pid), loop=loop)
    try:
        _watch_exit(proc, exited, loop, start)
    except OSError:  # no descriptor for the pidfd: stop it now, it is retried later
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        if cg is not None and moved is not None and moved.result():
            cg.kill()
            cg.remove()
        raise
    cap = None if blocks is None else blocks * 512
    markers = attempt_markers(claim.job.id, lease_owner, claim.generation)
    entered = None if moved is None else asyncio.wrap_future(moved, loop=loop)
    return Running(
        claim, proc, exited, log_path, start, log_cap=cap, cgroup=cg, entered=entered,
        markers=markers,
    )  # fmt: skip


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


#: How a command is started: argv, environment, the directory to enter before the exec
#: (None: the trampoline enters it, as the owner) and the credentials to drop to (uid,
#: gid, groups; None: the daemon's own).
CommandLine = tuple[list[str], dict[str, str], str | None, tuple[int, int, list[int]] | None]


def command_line(
    claim: Claim,
    lease_owner: str,
    nofile: int | None,
    blocks: int | None,
    gate: bool,
    launcher: str | None = None,
) -> CommandLine:
    """What starting the claim's command takes, the same for Popen and the spawn helper;
    ``launcher`` (the spawn helper's, engine/launcher.py): it drops to the owner and does
    the trampoline's work in one ``exec`` (no credentials left for the starter to drop)."""
    spec = claim.job.spec
    creds = None
    if os.geteuid() == 0 and spec.owner_uid != 0:
        # A root daemon runs each command as the user who submitted it, never as root:
        # the groups (exactly the owner's: gh-94632), then the group, then uid.
        name, _, _, gid = _account(spec.owner_uid)
        creds = (spec.owner_uid, gid, os.getgrouplist(name, gid))
    env = command_env(claim, lease_owner)
    argv = list(spec.command)
    cwd: str | None = spec.cwd
    if not (creds or nofile is not None or blocks is not None or gate):
        return argv, env, cwd, creds
    # Enter the directory after the drop (Popen's cwd= would enter it as root).
    if launcher is not None:
        return (
            [*launcher_argv(launcher, creds, spec.cwd, nofile, blocks, gate), *argv],
            env,
            None,
            None,
        )
    return [*trampoline(spec.cwd, env, nofile, blocks, gate), *argv], env, None, creds


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


def trampoline(
    cwd: str, env: dict[str, str], nofile: int | None, blocks: int | None = None, gate: bool = False
) -> list[str]:
    """The argv prefix that runs a command through :data:`TRAMPOLINE`."""

    def given(name: str) -> str:
        return "=" + env[name] if name in env else ""

    limit = "" if nofile is None else str(nofile)
    fsize = "" if blocks is None else str(blocks)
    return [
        "/bin/sh", "-c", TRAMPOLINE, "jobctl", limit, cwd, given("OLDPWD"), given("PWD"), fsize,
        "gate" if gate else "",
    ]  # fmt: skip


def gate_shut(code: int, tail: str) -> bool:
    """Whether the trampoline ended at its gate, never let go (:data:`GATE_SHUT`)."""
    return code == GATE_SHUT[0] and tail.encode() == GATE_SHUT[1]


def cwd_failure(code: int, tail: str, claim: Claim) -> tuple[int, str] | None:
    """(exit code, error) if the trampoline could not enter the job's directory: it
    exited 125 and the log holds its one line only (the command never ran)."""
    if code != CWD_FAILED[0] or tail.encode() != CWD_FAILED[1]:
        return None
    cwd, uid = claim.job.spec.cwd, claim.job.spec.owner_uid
    try:
        is_dir = Path(cwd).is_dir()
        why = "permission denied" if is_dir else "not a directory"
    except OSError:
        is_dir, why = False, "cannot be read"
    if not is_dir and not os.path.lexists(cwd):
        return 127, f"cannot start: no such working directory {cwd}"
    who = f"uid {uid} ({_account(uid)[0]})"
    return 126, f"cannot start: {who} cannot enter the working directory {cwd}: {why}"


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

"""The spawn helper's system work (engine/spawner.py), apart from its loop: privilege
drops, the attempt's cgroup, the gate, start times, the log's end at an exit, and the
socket's messages.

Like the helper, it imports nothing of jobctl but its siblings (the helper is a small
process: the standard library and these modules). What calls into the launcher's library
(spawnsys.Native) is in engine/spawnnative.py, re-exported here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import marshal
import os
import signal
import socket
import stat
import sys
import time
from typing import Any

from jobctl.engine.spawnnative import NO_NICE, Native, Refused, load_native

#: Re-exported: the launcher's library code moved to spawnnative (split from here); the
#: helper, tests and benchmarks know these as spawnsys.* too.
__all__ = ["NO_NICE", "Native", "Refused", "load_native"]

#: Largest message either side sends (a job's payload is at most 64 KiB).
MAX_MESSAGE = 1 << 20
#: Bytes of the log's end an exit report carries (engine/process.py ``TAIL_BYTES``).
TAIL_BYTES = 4096
PR_SET_CHILD_SUBREAPER = 36
#: Signals a command starts with at their default action (Python ignores these).
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


#: util-linux ``setpriv`` at a fixed path (never searched for): with it, a command of
#: another user starts with ``posix_spawn`` too (vfork, then one more exec); without it,
#: with a fork of this process (several times slower, see docs/benchmarks.md).
SETPRIV = next((p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.access(p, os.X_OK)), None)


def drop_argv(setpriv: str, creds: tuple[int, int, list[int]]) -> list[str]:
    """``setpriv`` words that set exactly the owner's groups, then its group and user
    (real, effective and saved ids alike), before the trampoline runs."""
    uid, gid, groups = creds
    return [setpriv, f"--groups={','.join(map(str, groups))}", f"--regid={gid}",
            f"--reuid={uid}", "--"]  # fmt: skip


def set_subreaper() -> bool:
    """Make orphaned descendants this process's children (``prctl``); False if refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def posix_spawn(
    argv: list[str], env: dict[str, str], cwd: str | None, out: int, stdin: int
) -> tuple[int, int]:
    """``os.posix_spawn`` in ``cwd``: (boot ticks just before, pid)."""
    if cwd is not None:
        os.chdir(cwd)  # as the owner: the helper runs as the daemon's user
    program = resolve(argv[0], env)
    before = boot_ticks()
    pid = os.posix_spawn(
        program,
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, out, 1),
            (os.POSIX_SPAWN_DUP2, out, 2),
        ],
        setsid=True,
        setsigmask=(),
        setsigdef=DEFAULT_SIGNALS,
    )
    return before, pid


def returncode(si_code: int, si_status: int) -> int:
    """A ``waitid`` result as ``Popen.returncode`` spells it (negative: the signal)."""
    return si_status if si_code == os.CLD_EXITED else -si_status


#: Nanoseconds per clock tick of ``/proc/PID/stat``'s start time (``USER_HZ``).
_TICK_NS = 10**9 // os.sysconf("SC_CLK_TCK")


def boot_ticks() -> int:
    """Clock ticks since boot now, as ``/proc/PID/stat`` counts a start time (the kernel
    stamps a new process with this clock, ``CLOCK_BOOTTIME``, and divides the same way)."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // _TICK_NS


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks since boot): with the pid, names the
    process for good (the same reading as process.process_start_time)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def resolve(program: str, env: dict[str, str]) -> str:
    """The file ``program`` names, searched on the job's ``PATH`` like ``execvpe``."""
    if "/" in program:
        return program
    denied: str | None = None
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", program)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK):
            return path
        denied = denied or path
    if denied is not None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def runnable(path: str) -> bool:
    """Whether :func:`resolve` would take the file ``path`` (a regular file we may run)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and os.access(path, os.X_OK)
    except OSError:
        return False


class OnPath:
    """:func:`resolve` as a check only, for starts whose own ``execvp`` searches ``PATH``
    (the launcher's words): raises as :func:`resolve` does when ``PATH`` has no such
    program. A program found before is checked at the file found then (one ``stat``, not
    a ``stat`` of each folder before it: ~24 µs of the helper's CPU per start for
    ``true``, issue 17): while that file is there, the search cannot fail (it finds it,
    or one in an earlier folder), which is all this says; gone, it searches again."""

    #: Entries kept (program and ``PATH`` pairs); past it, the memo starts afresh.
    LIMIT = 256

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], str] = {}

    def check(self, program: str, env: dict[str, str]) -> None:
        if "/" in program:
            return
        key = (program, env.get("PATH", os.defpath))
        known = self.found.get(key)
        if known is not None and runnable(known):
            return
        if len(self.found) >= self.LIMIT:
            self.found.clear()
        self.found[key] = resolve(program, env)


def make_cgroup(path: str | None, files: dict[str, str]) -> tuple[str | None, str | None]:
    """Make the attempt's cgroup and write its limit files: (path, None), or (None, why)
    when none could be made and the job needs none; raises :class:`Refused`."""
    if path is None:
        return None, None
    try:
        os.mkdir(path, 0o755)
    except OSError as exc:
        if files:
            raise Refused("cannot make the attempt's cgroup for its limits") from exc
        return None, str(exc)
    for name, value in files.items():
        try:
            write_file(os.path.join(path, name), value)
        except OSError as exc:
            rmdir_empty(path)
            raise Refused(f"cannot set the attempt's limits in {path}: {exc}") from exc
    return path, None


def write_file(path: str, text: str) -> None:
    write_bytes(path, text.encode())


def write_bytes(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def own_cgroup_procs() -> str | None:
    """``cgroup.procs`` of this process's cgroup v2 (the mount from
    ``/proc/self/mountinfo``, the path from ``/proc/self/cgroup``), or None."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
        with open("/proc/self/cgroup") as f:
            own = next((x[3:] for x in f.read().splitlines() if x.startswith("0::")), None)
    except OSError:
        return None
    for line in mounts:
        head, sep, tail = line.partition(" - ")
        if own is not None and sep and tail.split(" ", 1)[0] == "cgroup2":
            path = os.path.join(head.split()[4], own.lstrip("/"), "cgroup.procs")
            return path if os.path.exists(path) else None
    return None


def open_gate(fd: int) -> None:
    """Let the command held at its gate go (one line, then the pipe is closed)."""
    with contextlib.suppress(OSError):  # it is gone already: nothing to let go
        os.write(fd, b"\n")
    os.close(fd)


def rmdir_empty(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:  # a process is left in it (EBUSY)
        return False
    return True


def log_end(path: str) -> tuple[int, bytes]:
    """The log's size and its last :data:`TAIL_BYTES` (``-1``: unreadable here). An
    empty log (most are) costs one ``lstat``, not an open, a stat and a close."""
    try:
        st = os.lstat(path)
    except OSError:
        return -1, b""
    if not stat.S_ISREG(st.st_mode):
        return -1, b""
    if st.st_size == 0:
        return 0, b""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return -1, b""
    try:
        end = os.fstat(fd).st_size
        return end, os.pread(fd, TAIL_BYTES, max(0, end - TAIL_BYTES)) if end else b""
    except OSError:
        return -1, b""
    finally:
        os.close(fd)


def release(
    pid: int, cg: str | None, error: str | None, nice: int | None
) -> tuple[str | None, str | None]:
    """Set the niceness of the command held at its gate (else kill it: raises Refused),
    then move it into ``cg``; returns the cgroup it is in and why none."""
    if nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            if cg is not None:
                rmdir_empty(cg)  # it never entered it
            raise Refused(f"cannot set nice {nice}: {exc}") from exc
    if cg is None:
        return None, error
    try:
        write_file(os.path.join(cg, "cgroup.procs"), str(pid))
    except OSError as exc:
        rmdir_empty(cg)
        return None, f"pid {pid}: {exc}"
    return cg, None


def fork_exec(
    argv: list[str],
    env: dict[str, str],
    out: int,
    stdin: int,
    creds: tuple[int, int, list[int]],
) -> int:
    """Fork this small process; the child drops to ``creds`` and execs ``argv`` (the
    trampoline, which enters the directory as the owner). Returns after the exec (or
    raises the child's error, like Popen)."""
    uid, gid, groups = creds
    program = resolve(argv[0], env)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or exits
        code = 127
        try:
            os.close(err_r)
            os.setsid()
            for sig in (*DEFAULT_SIGNALS, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the helper blocks SIGCHLD
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            os.dup2(stdin, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.execve(program, argv, env)
        except OSError as exc:
            os.write(err_w, marshal.dumps((exc.errno, exc.strerror, filename_text(exc.filename))))
        finally:
            os._exit(code)
    os.close(err_w)
    try:
        data = _read_all(err_r)
    finally:
        os.close(err_r)
    if data:
        os.waitpid(pid, 0)
        num, text, name = marshal.loads(data)
        raise OSError(num, text, name)
    return pid


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def filename_text(filename: object) -> str | None:
    return None if filename is None else os.fsdecode(filename)  # type: ignore[arg-type]


def chunks(items: list[Any], limit: int = MAX_MESSAGE // 2) -> list[bytes]:
    """``items`` as marshal-ed lists of at most about ``limit`` bytes each (one item
    alone may be larger, up to :data:`MAX_MESSAGE`), in order. A pass's answers nearly
    always fit one message: then each is marshal-ed once, not once to size it and again."""
    whole = marshal.dumps(items)
    if len(whole) <= limit:
        return [whole]
    out: list[bytes] = []
    group: list[Any] = []
    size = 0
    for item in items:
        one = len(marshal.dumps(item))
        if group and size + one > limit:
            out.append(marshal.dumps(group))
            group, size = [], 0
        group.append(item)
        size += one
    if group:
        out.append(marshal.dumps(group))
    return out


def recv(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the descriptors that came with it (close-on-exec at once: a
    command must never inherit another's gate)."""
    data, anc, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(16), socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, body in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(body) - len(body) % 4
            fds.extend(int.from_bytes(body[i : i + 4], sys.byteorder) for i in range(0, usable, 4))
    return data, fds


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass

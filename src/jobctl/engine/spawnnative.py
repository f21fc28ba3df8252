"""The launcher's code run in the spawn helper (engine/launch.c built as a library):
:class:`Native`, and the start test it must pass before the helper uses it.

Split from spawnsys along its seam: this is the only part of the helper's system work
that calls into the launcher's library (``ctypes``); spawnsys re-exports its names, so
``spawnsys.Native`` and ``spawnsys.load_native`` still work. Like the helper, it imports
nothing of jobctl (the helper is a small process: the standard library and its siblings).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from typing import Any


class Refused(Exception):
    """A limit that cannot be applied: the command must not run (``StartRefused``)."""


class BornKilled(OSError):
    """The kernel SIGKILLed a command ``clone3`` started into its cgroup before it ran its
    first instruction (launch.c ``NEVER_RAN``; it is reaped already, so as with any
    OSError of a start no process of it is left). Seen on 6.18: the kill sequence of the
    target cgroup differs from that of the helper's own cgroup (``cgroup.kill`` written
    in one of them, or an ancestor, since: engine/cgpool.py). The helper then finds out
    which (spawnstart.Starter.born_killed) and starts the command the other way."""


#: launch.c's ``NO_NICE``: keep the helper's niceness.
NO_NICE = 1000
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: launch.c's ``NEVER_RAN``: the start time of a child the kernel killed at its birth.
NEVER_RAN = -2


class Native:
    """The launcher's work done in a ``vfork`` child of the helper (engine/launch.c built
    as a library, ``jobctl_spawn``): a command the daemon sends through the launcher starts
    with no ``exec`` of the launcher (issue 17: that exec cost more CPU than ``true``
    itself). Same argv, same lines and statuses on failure, same attributes as the
    helper's ``posix_spawn`` (new session, stdin, output to the log, SIGPIPE and SIGXFSZ
    at their default, an empty signal mask); only commands held at a gate still exec the
    launcher (a ``vfork`` child cannot wait there: the helper waits for its exec)."""

    def __init__(self, library: str) -> None:
        #: The launcher of the same source: requests naming it are taken here.
        self.launcher = library.removesuffix(".so")
        lib = ctypes.CDLL(library)
        text, num = ctypes.c_char_p, ctypes.c_int
        #: The last start's start time (``/proc/PID/stat`` field 22) as the library saw it
        #: (the boot clock read just before the child was made and by the child first
        #: thing, one tick apart at most: launch.c), or None: read it from ``/proc``.
        self.born: int | None = None
        self._born = ctypes.c_longlong(-1)
        self._born_ref = ctypes.byref(self._born)
        ticks = ctypes.POINTER(ctypes.c_longlong)
        self._spawn = lib.jobctl_spawn
        self._spawn.argtypes = [num, text, num, text, num, num, ticks]
        self._spawn.restype = ctypes.c_int
        #: ``clone3`` with ``CLONE_INTO_CGROUP`` (x86-64 builds; None: not built, or it
        #: failed its start test): a command born in its cgroup, the helper never in it.
        self.into: Any = getattr(lib, "jobctl_spawn_into", None)
        if self.into is not None:
            self.into.argtypes = [num, text, num, text, num, num, num, num,
                                  ctypes.POINTER(ctypes.c_int), ticks]  # fmt: skip
            self.into.restype = ctypes.c_int

    def own_words(self) -> list[str]:
        """The launcher's words for a command of the helper's own user, in the directory
        the helper is in, with nothing else to set (``jobctl_spawn`` runs the rest)."""
        return [self.launcher, "-", "-", "-", ".", "", "", "", "--"]

    def takes(self, argv: list[str]) -> bool:
        """Whether ``argv`` is the launcher's (and not held at a gate)."""
        return argv[0] == self.launcher and len(argv) > 9 and argv[7] != "gate"

    def takes_gated(self, argv: list[str]) -> bool:
        """Whether ``argv`` is the launcher's, held at a gate, and can do without it: born
        in its cgroup with its niceness (:attr:`into`), it needs none."""
        return self.into is not None and argv[0] == self.launcher and len(argv) > 9

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        stdin: int,
        out: int,
        cgroup: int = -1,
        nice: int | None = None,
    ) -> int:
        """Start ``argv`` (the launcher's words, then the command): its pid; ``cgroup``
        (a descriptor of its directory): born in it with niceness ``nice`` (:attr:`into`
        first). Raises ValueError as ``posix_spawn`` does, OSError when no process could
        be made (:class:`BornKilled`: one was, and the kernel killed it before it ran),
        :class:`Refused` when the niceness could not be set (nothing ran). Sets
        :attr:`born`."""
        for key in env:
            if not key or "=" in key:
                raise ValueError("illegal environment variable name")
        args, envs = _blob(argv), _blob(list(map("=".join, env.items())))
        self.born = None
        born = self._born_ref
        if cgroup < 0:
            pid = self._spawn(len(argv), args, len(env), envs, stdin, out, born)
        else:
            refused = ctypes.c_int(0)
            level = NO_NICE if nice is None else nice
            pid = self.into(
                len(argv), args, len(env), envs, stdin, out, cgroup, level, refused, born
            )
            if pid < 0 and refused.value:
                raise Refused(f"cannot set nice {nice}: {os.strerror(-pid)}")
        if pid < 0:
            raise OSError(-pid, os.strerror(-pid))
        ticks = self._born.value
        if ticks == NEVER_RAN:
            os.waitpid(pid, 0)  # exiting already: vfork's wait ended at its exit
            raise BornKilled(errno.ECANCELED, "the kernel killed the command at its birth")
        self.born = ticks if ticks >= 0 else None
        return int(pid)


def _blob(items: list[str]) -> bytes:
    """``items`` as one run of NUL-terminated strings, as ``os.fsencode`` encodes each
    (a NUL inside one would split it: refused, as ``posix_spawn`` refuses it)."""
    text = "\0".join(items)
    if text.count("\0") != max(len(items) - 1, 0):
        raise ValueError("embedded null byte")
    return os.fsencode(text) + b"\0"


def load_native(library: str, home: str | None = None) -> Native | None:
    """The helper's library when it loads and one start of ``/bin/true`` through it
    exits 0 (as the daemon tests its launcher once); None: exec the launcher. Its
    ``into`` is kept when a start into ``home`` (the helper's own cgroup directory)
    works too."""
    if not library:
        return None
    try:
        native = Native(library)
        if not _true_starts(native, None):
            return None
    except (OSError, AttributeError, ValueError):
        return None
    if native.into is not None and not (home and _true_starts(native, home)):
        native.into = None
    return native


def _true_starts(native: Native, cgroup: str | None) -> bool:
    """Whether ``/bin/true`` started through ``native`` (in ``cgroup``) exits 0."""
    try:
        fd = -1 if cgroup is None else os.open(cgroup, _DIR)
    except OSError:
        return False
    try:
        return _true_exit(native, fd) == 0
    except OSError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def kills_at_birth(native: Native, path: str) -> bool:
    """Whether the kernel kills, at its birth, a command ``clone3`` starts into a new
    cgroup (made at ``path``, removed after): then it kills every command started into
    any new cgroup (every new slot) from this process's cgroup, whose kill sequence moved
    (engine/cgpool.py), and that way of starting is no use here. False also when it
    cannot tell (no cgroup could be made: the starts will say so themselves)."""
    _rmdir(path)  # one an earlier helper of the same name left
    try:
        os.mkdir(path, 0o755)
        fd = os.open(path, _DIR)
    except OSError:
        _rmdir(path)
        return False
    try:
        _true_exit(native, fd)
    except BornKilled:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        _rmdir(path)
    return False


def _rmdir(path: str) -> None:
    """Remove the probe's cgroup, if it is there and empty."""
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _true_exit(native: Native, cgroup: int) -> int:
    """The exit code of ``/bin/true`` started through ``native`` (born in the cgroup whose
    directory ``cgroup`` is open on; -1: none); raises OSError when none ran."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        words = [native.launcher, "-", "-", "-", "/", "", "", "", "--", "/bin/true"]
        pid = native.spawn(words, {"PATH": "/usr/bin:/bin"}, null, null, cgroup)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(null)

"""One cgroup (v2) per attempt: the whole process tree of a command, found and stopped.

A command may leave its process group (``setsid``, a double fork): its group no longer
names all of it. A cgroup does: every process a command starts stays in the command's
cgroup, whatever it does with sessions and groups. The daemon makes one per attempt
where it may (:func:`detect`), moves the command into it before the command runs
(until then the command waits at a gate: the trampoline of engine/commandline.py or the
launcher, engine/launch.c), stops the tree through it and removes it when the attempt
ends.

Interface, for the stop paths and for resource limits (``memory.max``, ``cpu.max``)
written on the same directory later::

    cgroups = detect("auto")          # Cgroups, or None where none may be made
    cg = cgroups.create(name)         # Cgroup: an empty attempt directory
    cg.add_pid(pid)                   # move a process in (its children follow)
    enter(cg, pid, gate)              # the same on a thread, then open the spawn's gate
    cg.signal(sig); cg.kill()         # every member; kill() is SIGKILL, race-free
    cg.populated(); cg.remove()       # rmdir, only once empty

Where attempts go: ``<cgroup2 mount><the daemon's own cgroup>/jobctl/``. The daemon may
make them when it can create that directory and write its own cgroup's ``cgroup.procs``
(moving a process needs write access to the common ancestor): as root anywhere, or as
any user in a cgroup delegated to it (systemd ``Delegate=yes``, see docs/systemd.md).
Only the ``cgroup.*`` core files are used, so no controller needs enabling; limits will
need the controllers enabled in each ``cgroup.subtree_control`` on the way down, and
therefore the daemon itself moved into a leaf of its own cgroup first (cgroup v2 allows
no processes in an inner cgroup that distributes controllers).

Killing: ``cgroup.kill`` (Linux 5.14+) kills every member at once, including ones being
forked; before 5.14 the cgroup is frozen, every member gets SIGKILL, then it is thawed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_log = logging.getLogger("jobctl.executor")
#: The directory, under the daemon's own cgroup, that holds the attempts' cgroups.
SUBDIR = "jobctl"
MODES = ("auto", "off")


@dataclass(frozen=True)
class Cgroups:
    """Where this daemon makes its attempts' cgroups."""

    base: Path
    #: Whether ``cgroup.kill`` exists (False: freeze, signal every member, thaw).
    kill_file: bool = True
    #: Controllers enabled for the attempts' cgroups (``memory``, ``cpu``): what resource
    #: limits may use (:func:`enable_controllers`).
    controllers: frozenset[str] = frozenset()

    def create(self, name: str) -> Cgroup:
        """Make the (empty) cgroup ``name``; raises OSError when it cannot."""
        path = self.base / name
        path.mkdir(mode=0o755)
        return Cgroup(path, self.kill_file)

    def pool_prefix(self, lease_owner: str) -> str:
        """Where the spawn helper's pooled cgroups go and how their names start (this
        daemon's :func:`owner_prefix`: :meth:`sweep` reads the pid back; engine/cgpool.py)."""
        return f"{self.base}/{owner_prefix(lease_owner)}"

    def sweep(self) -> int:
        """Remove the empty attempt cgroups of daemons that are gone (names start with the
        daemon's pid, see ``cgroup.attempt_name``); a live daemon's are left alone, and a
        populated one cannot be removed. Returns how many were removed."""
        removed = 0
        with contextlib.suppress(OSError):
            for entry in self.base.iterdir():
                pid = entry.name.split("-", 1)[0]
                if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                    continue
                with contextlib.suppress(OSError):
                    entry.rmdir()
                    removed += 1
        return removed


class Cgroup:
    """One attempt's cgroup directory.

    ``path`` may be given as a string, made a :class:`Path` when first used: the spawn
    helper's answer names the cgroup of every attempt, and a ``Path`` of it cost ~4 µs
    per start on the daemon's loop (issue 17), where most attempts never use it (a
    quick command's cgroup is handed back or removed by the helper unread)."""

    def __init__(self, path: str | Path, kill_file: bool = True) -> None:
        self._given = path
        self._path = path if isinstance(path, Path) else None
        self.kill_file = kill_file
        #: Handed back to the spawn helper's pool (:meth:`hand_back`): no longer the
        #: attempt's, so nothing here reads, signals, kills or removes it any more.
        self.handed_back = False
        #: ``cgroup.kill`` was written in it (:meth:`kill`): the kernel then SIGKILLs every
        #: process later started *into* it by ``clone3`` (``CLONE_INTO_CGROUP``) from another
        #: cgroup, so a slot of the spawn helper's pool is never used again (engine/cgpool.py).
        self.killed = False

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = Path(self._given)
        return self._path

    def __eq__(self, other: object) -> bool:  # as the dataclass it was: path and kill_file
        if not isinstance(other, Cgroup):
            return NotImplemented
        return (self.path, self.kill_file) == (other.path, other.kill_file)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"Cgroup(path={self.path!r}, kill_file={self.kill_file!r})"

    def hand_back(self) -> None:
        """Fence this handle before its cgroup goes back to the pool (engine/cgpool.py):
        a stop of the ended attempt still in progress (a cancel in its grace period) must
        never signal or kill the next attempt started in the same cgroup."""
        self.handed_back = True

    def limit(self, files: dict[str, str]) -> None:
        """Write resource limits (``memory.max``, ``cpu.max``); raises OSError."""
        for name, value in files.items():
            _write(self.path / name, value)

    def add_pid(self, pid: int) -> None:
        """Move ``pid`` in; raises OSError (e.g. it is gone, or no permission)."""
        _write(self.path / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        if self.handed_back:
            return []
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(word) for word in text.split()]

    def populated(self) -> bool:
        """Whether any process is left in it (``cgroup.events``)."""
        if self.handed_back:
            return False
        try:
            text = (self.path / "cgroup.events").read_text()
        except OSError:
            return False
        return "populated 1" in text

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every member (a process forked meanwhile may miss it)."""
        for pid in self.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every member, including ones being forked. An empty cgroup is left
        alone: nothing is in it to kill or fork (a zombie is not counted), and a write of
        ``cgroup.kill`` would mark it for the kernel (:attr:`killed`)."""
        if self.handed_back or not self.populated():
            return
        if self.kill_file:
            self.killed = True
            with contextlib.suppress(FileNotFoundError):
                _write(self.path / "cgroup.kill", "1")
            return
        self._freeze_and_kill()

    def _freeze_and_kill(self) -> None:
        freeze = self.path / "cgroup.freeze"
        try:
            _write(freeze, "1")
        except OSError:
            self.signal(signal.SIGKILL)
            return
        try:
            deadline = time.monotonic() + 1.0
            while "frozen 1" not in _read(self.path / "cgroup.events"):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.002)
            self.signal(signal.SIGKILL)  # frozen: nothing forks; SIGKILL ends frozen tasks
        finally:
            with contextlib.suppress(OSError):
                _write(freeze, "0")

    def remove(self) -> bool:
        """Remove the directory; False while a process is left in it."""
        if self.handed_back:  # the pool's now
            return True
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def attempt_name(lease_owner: str, job_id: int, generation: int) -> str:
    """The attempt's cgroup name: the daemon's pid and tag (of ``host:pid:tag``), the job
    and the generation; :func:`owner_prefix` is this daemon's part. :meth:`Cgroups.sweep`
    reads the pid back."""
    return f"{owner_prefix(lease_owner)}{job_id}.{generation}"


@cache  # one lease owner per daemon: not rebuilt character by character per attempt
def owner_prefix(lease_owner: str) -> str:
    tail = lease_owner.split(":", 1)[-1]
    return "".join(c if c.isalnum() or c in "_-" else "-" for c in tail) + "."


def enter(cg: Cgroup, pid: int, gate: int) -> Future[bool]:
    """Move ``pid`` (held at its gate) into ``cg``, then close ``gate`` (the write end of
    the pipe it waits on). Done: True, or False if the move failed (``cg`` is removed).

    A move waits for the kernel (an RCU grace period: ~0.7 ms, little CPU), so it runs on
    a thread; each pending move holds its gate's descriptor, so past :data:`_MOVES`
    pending ones it is done here and now."""
    if _MOVES.acquire(blocking=False):
        return _MOVER.submit(_enter, cg, pid, gate, _MOVES)
    done: Future[bool] = Future()
    done.set_result(_enter(cg, pid, gate))
    return done


def _enter(cg: Cgroup, pid: int, gate: int, slot: threading.Semaphore | None = None) -> bool:
    try:
        cg.add_pid(pid)
    except OSError as exc:
        _log.warning("event=cgroup_failed pid=%s error=%s", pid, exc)
        cg.remove()
        return False
    finally:
        open_gate(gate)
        if slot is not None:
            slot.release()
    return True


def open_gate(gate: int) -> None:
    """Let a command held at its gate go: one line, then the pipe is closed (closed
    without the line, the trampoline ends without running the command:
    engine/commandline.py)."""
    with contextlib.suppress(OSError):  # it is gone already: nothing to let go
        os.write(gate, b"\n")
    os.close(gate)


_MOVER = ThreadPoolExecutor(4, thread_name_prefix="jobctl-cgroup")
_MOVES = threading.Semaphore(16)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def mount_point(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or its ``unified``
    directory on a hybrid host), from ``/proc/self/mountinfo``."""
    if mountinfo is None:
        mountinfo = _read(Path("/proc/self/mountinfo"))
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        if sep and tail.split(" ", 1)[0] == "cgroup2":
            return Path(head.split()[4])
    return None


def own_cgroup(text: str | None = None) -> str | None:
    """This process's cgroup v2 path (the ``0::`` line of ``/proc/self/cgroup``)."""
    if text is None:
        text = _read(Path("/proc/self/cgroup"))
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def detect(mode: str = "auto") -> tuple[Cgroups | None, str]:
    """The daemon's attempt cgroups, or None and why not (``job_cgroups`` setting)."""
    if mode == "off":
        return None, "job_cgroups is off"
    mount, own = mount_point(), own_cgroup()
    if mount is None or own is None:
        return None, "no cgroup v2 hierarchy"
    parent = mount / own.lstrip("/")
    if not os.access(parent / "cgroup.procs", os.W_OK):
        return None, f"{parent} is not delegated to this user"
    base = parent / SUBDIR
    try:
        base.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        return None, f"cannot create {base}: {exc.strerror}"
    controllers = enable_controllers(parent, base)
    return Cgroups(base, (base / "cgroup.kill").exists(), controllers), str(base)


#: The controllers resource limits use.
LIMIT_CONTROLLERS = ("memory", "cpu")


def enable_controllers(parent: Path, base: Path) -> frozenset[str]:
    """Enable ``memory`` and ``cpu`` for the attempts (in ``parent``'s and ``base``'s
    ``cgroup.subtree_control``) where the hierarchy offers them; returns those enabled.

    cgroup v2 lets an inner cgroup hand controllers down only when it holds no process
    itself (the root excepted): a daemon in its own non-root cgroup gets none here, and
    limits that need them are refused (docs/operations.md says how to give them)."""
    enabled = set()
    for name in LIMIT_CONTROLLERS:
        if name not in _read(parent / "cgroup.controllers").split():
            continue
        try:
            for where in (parent, base):
                if name not in _read(where / "cgroup.subtree_control").split():
                    _write(where / "cgroup.subtree_control", f"+{name}")
        except OSError as exc:
            _log.info("event=cgroup_controller_unavailable name=%s error=%s", name, exc)
            continue
        enabled.add(name)
    return frozenset(enabled)

"""The spawn helper's pool of attempt cgroups: made once, used by attempt after attempt.

Why (issue 17): making a cgroup (``mkdir``, ~25 µs of kernel time) and removing it
(``rmdir``, ~20 µs) per attempt was about 40% of the helper's CPU per start of a short
command. A pooled cgroup (a *slot*) is made the first time one is needed, and after its
attempt's exit and the daemon's hand-back it waits, empty, for the next attempt: in a
steady stream of starts no cgroup is made or removed at all. The helper keeps each
slot's directory open (``clone3`` into it needs no ``open``) and its ``cgroup.events``
(read with one ``pread`` at the exit).

Names: cgroup v2 refuses ``rename(2)``, so a slot keeps its name for life and names no
attempt: ``<the daemon's prefix>h<helper pid>.<n>`` in the daemon's attempts directory
(engine/cgroup.py). The daemon learns the path from the start's answer and stops the tree
by it; crash recovery finds a command by its pid and its markers, never by its cgroup's
name; the start-up sweep reads the daemon's pid from the name's start, as before. The
helper's pid in the name means a slot name is never made twice by two helpers of one
daemon: a name the daemon still holds (a stop of an ended attempt) never comes back as
another attempt's cgroup.

A slot is used again only when all of these hold, else it is removed (or, with a process
left in it, reported to the daemon, which kills what is in it and removes it):

* the attempt's exit left it empty (``populated 0``: an exited, unreaped command is not
  counted), checked at the exit and again at the hand-back;
* the daemon handed it back (``release``): it does so after the attempt's end, having
  fenced its handle first, so no stop of that attempt (a cancel, a timeout, a lost lease
  still in its grace period) can write ``cgroup.kill`` once the slot holds another
  attempt (engine/proctree.py);
* every limit file an attempt wrote in it was written back to its default
  (:data:`RESET`; a file without a known default makes the slot one-use);
* no ``cgroup.kill`` was ever written in it (the daemon's hand-back says so): the kernel
  SIGKILLs, at its birth, every process started by ``clone3`` (``CLONE_INTO_CGROUP``)
  into a cgroup killed that way from a process in another cgroup (seen on 6.18:
  ``cgroup_css_set_fork`` takes the kill sequence number of the parent's cgroup, not
  the target's, and ``cgroup_post_fork`` compares it with the target's). Issue 17: a
  stop that wrote it on an attempt's slot left every later attempt in the slot killed
  within milliseconds. The daemon writes it only with a process in the cgroup
  (``cgroup.Cgroup.kill``), so a stop that ended its command with SIGTERM keeps the slot.
  And a slot whose command was SIGKILLed is not kept at all (someone else, an operator or
  a kill of an ancestor cgroup, may have written it), nor one the kernel killed a command
  in at its birth (:meth:`Pool.retire`: the helper sees that, spawnstart.Starter
  .born_killed, and starts that command the other way): an outside write costs at most
  the attempt it hit, not every later one in the slot.

A new cgroup's kill sequence starts at 0 (it is not its parent's): a helper whose own
cgroup was killed before it started there would have every command born in a new slot
killed. Its start-up probe (spawnstart.Starter.probe) finds that out, and the helper then
starts commands by stepping into their slots instead (docs/architecture.md).

Like the helper, this imports nothing of jobctl but its sibling spawnsys.
"""

from __future__ import annotations

import contextlib
import os
import resource

from jobctl.engine.spawnsys import Refused, rmdir_empty, write_file

#: Each limit file's value when no limit is set: written back before a slot is reused.
RESET = {
    "memory.max": "max",
    "memory.high": "max",
    "memory.swap.max": "max",
    "pids.max": "max",
    "cpu.max": "max",
    "cpu.weight": "100",
    "cgroup.max.depth": "max",
    "cgroup.max.descendants": "max",
}
#: Most free slots kept (each holds two descriptors); more are removed at the hand-back.
KEEP = 128
#: Most slots at once (and at most a quarter of the open-file limit: two descriptors
#: each, and the commands' logs need theirs); past that, attempts get a cgroup made for
#: them and removed at their exit, as without the pool.
MOST = 1024
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Slot:
    """One pooled cgroup: its path, its directory and ``cgroup.events`` held open."""

    __slots__ = ("ended", "events", "fd", "files", "path", "retired")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, _DIR)
        try:
            self.events = os.open(os.path.join(path, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(self.fd)
            raise
        #: Limit files an attempt wrote here (reset before the next attempt).
        self.files: set[str] = set()
        #: Its attempt has exited (only then may the daemon hand it back).
        self.ended = False
        #: The kernel killed a command at its birth here (:meth:`Pool.retire`).
        self.retired = False

    def populated(self) -> bool:
        """Whether a process is in it (unreadable: assume so, never reuse it)."""
        try:
            return b"populated 0" not in os.pread(self.events, 64, 0)
        except OSError:
            return True

    def close(self) -> None:
        os.close(self.events)
        os.close(self.fd)


class Pool:
    """The helper's slots: free ones, and those holding an attempt or awaiting its
    hand-back (``used``, by path)."""

    def __init__(self, prefix: str, keep: int = KEEP, most: int = MOST) -> None:
        #: ``prefix``: the daemon's attempts directory and its name prefix.
        self.prefix = f"{prefix}h{os.getpid()}."
        self.keep = keep
        self.most = min(most, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4)
        self.free: list[Slot] = []
        self.used: dict[str, Slot] = {}
        self.made = 0
        sweep(prefix)

    def has_room(self) -> bool:
        """Whether :meth:`take` may be used: a free slot, or room for one more."""
        return bool(self.free) or len(self.used) < self.most

    def take(self, files: dict[str, str]) -> tuple[str | None, str | None]:
        """A slot for an attempt, ``files`` written: (path, None), or (None, why) when
        none could be made and the job needs none; raises :class:`Refused` (as
        spawnsys.make_cgroup)."""
        try:
            slot = self.free.pop() if self.free else self._make()
        except OSError as exc:
            if files:
                raise Refused("cannot make the attempt's cgroup for its limits") from exc
            return None, str(exc)
        self.used[slot.path] = slot
        for name, value in files.items():
            slot.files.add(name)
            try:
                write_file(os.path.join(slot.path, name), value)
            except OSError as exc:
                self.discard(slot.path)
                raise Refused(f"cannot set the attempt's limits in {slot.path}: {exc}") from exc
        return slot.path, None

    def _make(self) -> Slot:
        while True:
            path = f"{self.prefix}{self.made}"
            self.made += 1
            try:
                os.mkdir(path, 0o755)
                break
            except FileExistsError:  # an earlier helper's of the same pid, with a process
                continue
        try:
            return Slot(path)
        except OSError:
            rmdir_empty(path)
            raise

    def dir_fd(self, path: str) -> int | None:
        """The slot's open directory (for ``clone3``), or None: not a slot."""
        slot = self.used.get(path)
        return None if slot is None else slot.fd

    def exited(self, path: str, killed: bool = False) -> bool | None:
        """The attempt in ``path`` exited: True when it is kept for the daemon's hand-back
        (empty), False when a process is left in it (no longer a slot: the daemon kills
        what is in it and removes it), None when it is no slot, or no longer one: its
        command was ``killed`` by SIGKILL (a ``cgroup.kill`` may have been written in it,
        by the daemon or by anyone: see the module's doc; the caller removes it), or it
        was retired (:meth:`retire`)."""
        slot = self.used.get(path)
        if slot is None:
            return None
        if killed or slot.retired:
            del self.used[path]
            slot.close()
            return None
        if slot.populated():
            del self.used[path]
            slot.close()
            return False
        slot.ended = True
        return True

    def retire(self, path: str) -> None:
        """The kernel killed a command ``clone3`` started into ``path`` at its birth, and
        would not kill one in a new cgroup: ``cgroup.kill`` was written in this slot from
        outside (the daemon writes it only with a process in it). Its attempt runs on in
        it (started the other way); at its exit it is removed (:meth:`exited`)."""
        slot = self.used.get(path)
        if slot is not None:
            slot.retired = True

    def release(self, path: str, reuse: bool = True) -> None:
        """The daemon handed ``path`` back (no stop of its attempt can target it now):
        free again, clean, or removed (always when not ``reuse``: its ``cgroup.kill`` was
        written). A path of a helper that died is removed if empty; anything else (a slot
        still running its attempt, one handed back twice) is left as it is."""
        slot = self.used.get(path)
        if slot is None or not slot.ended:
            if slot is None and not path.startswith(self.prefix):
                rmdir_empty(path)  # a dead helper's; one of ours is free or gone already
            return
        del self.used[path]
        if not reuse or len(self.free) >= self.keep or slot.populated() or not _reset(slot):
            _remove(slot)
            return
        slot.ended = False
        self.free.append(slot)

    def close(self) -> None:
        """The daemon is gone: remove the free slots and the ended ones (empty); those
        still holding an attempt stay (the next daemon's sweep removes them)."""
        for slot in [*self.free, *(s for s in self.used.values() if s.ended)]:
            slot.close()
            rmdir_empty(slot.path)
        self.free.clear()
        self.used = {p: s for p, s in self.used.items() if not s.ended}

    def discard(self, path: str) -> None:
        """No process of ``path`` ran (a failed start): remove it."""
        slot = self.used.pop(path, None)
        if slot is None:
            rmdir_empty(path)
        else:
            _remove(slot)


def _reset(slot: Slot) -> bool:
    """Write every limit file an attempt set back to its default; False: one could not."""
    for name in slot.files:
        value = RESET.get(name)
        if value is None:
            return False
        try:
            write_file(os.path.join(slot.path, name), value)
        except OSError:
            return False
    slot.files.clear()
    return True


def _remove(slot: Slot) -> None:
    """Remove the slot; one that cannot be removed (a process in it although its attempt
    ended and was handed back: nothing of ours may run there) is killed, left to the
    start-up sweep."""
    slot.close()
    if not rmdir_empty(slot.path):
        with contextlib.suppress(OSError):
            write_file(os.path.join(slot.path, "cgroup.kill"), "1")
        rmdir_empty(slot.path)


def sweep(prefix: str) -> int:
    """At a helper's start: remove the empty slots of this daemon's earlier helpers (one
    that died; the new helper's names carry its own pid, so a name the daemon may still
    hold never comes back); those with a process in them are the daemon's (adopted
    commands: it removes them at their end). Returns how many were removed."""
    folder, start = os.path.split(prefix)
    start += "h"
    removed = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(start) and rmdir_empty(os.path.join(folder, name)):
                removed += 1
    return removed

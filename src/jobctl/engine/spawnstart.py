"""How the spawn helper (engine/spawner.py) starts a command: its process side.

Split from engine/spawner.py along its seam: :class:`Starter` turns one request's fields
into a running command (its log, its cgroup, its niceness, its credentials, its start
time); spawner.Helper, a Starter, reads the daemon's requests and reports starts and exits.
Like the helper, this imports nothing of jobctl but its siblings (the helper's process has
only the standard library loaded). How a command starts:

* commands of the daemon's own user start with ``os.posix_spawn`` (``vfork``: the cost
  does not grow with any process's size), one exec, the helper entering the working
  directory first (it is the same user, so it enters it as the owner would);
* commands that change user start the same way through the start-up launcher the daemon
  puts in front of them (engine/launch.c: the owner's groups, group and user, then the
  directory entered as the owner, one small ``exec``); without one, through util-linux
  ``setpriv`` and the trampoline (engine/commandline.py) that enters the directory as the
  owner; without ``setpriv``, with a ``fork`` of this small process whose child drops
  the same way before it runs the trampoline;
* the attempt's log is created and opened here, off the daemon;
* the attempt's cgroup is made here (its limits written) and removed here when the
  command's exit leaves it empty: the daemon reads no file and hands nothing to a thread
  for any of it (issue 17: those hops cost the daemon more CPU than the start itself). A
  command without limits or niceness is *born* in it (``clone3`` into it with the
  launcher's library, else the helper steps into the cgroup for the spawn and back out);
  one with them is held at its gate (its stdin, a pipe) until its niceness is set and it
  is in the cgroup, except with ``clone3``: born in it, its niceness set in the child;
  one the kernel kills at its birth there is started the other way
  (:meth:`Starter.born_killed`, and :meth:`Starter.probe` at the helper's start);
* a request that names the launcher runs the launcher's code in a ``vfork`` child of the
  helper when its library loaded (spawnsys.Native): no ``exec`` of the launcher;
* the start time is the boot clock's tick around the spawn (``/proc`` read only when the
  spawn straddled a tick).
"""

from __future__ import annotations

import os

from jobctl.engine.cgpool import Pool
from jobctl.engine.spawnnative import BornKilled, Native, Refused, kills_at_birth
from jobctl.engine.spawnsys import (
    SETPRIV,
    OnPath,
    boot_ticks,
    drop_argv,
    fork_exec,
    make_cgroup,
    open_gate,
    own_cgroup_procs,
    posix_spawn,
    release,
    rmdir_empty,
    write_bytes,
)

__all__ = ["Starter"]

_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
#: The warning the daemon logs when the kernel would kill every command born in a new
#: cgroup (:meth:`Starter.clone3_off`): the cause, and the fix (docs/operations.md).
CLONE3_OFF = (
    "event=spawn_clone3_off helper={pid} cgroup={cgroup!r} reason='the kernel kills, at "
    "birth, every command clone3 starts into a new cgroup from this cgroup: cgroup.kill "
    "was written in it or an ancestor' fix='restart the daemon in a fresh cgroup' "
    "fallback='commands enter their cgroups without clone3 (the helper steps in, or "
    "moves them in at their gate)'"
)


class Starter:
    """The helper's process side: start one command as a request asks (spawner.Helper
    adds the socket, the requests and the reports)."""

    def __init__(self, native: Native | None = None, pool: Pool | None = None) -> None:
        #: Starts the launcher's requests without its exec (spawnsys.Native), or None.
        self.native = native
        #: Where attempts' cgroups come from (engine/cgpool.py); None: one made per attempt.
        self.pool = pool
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.made_dirs: set[str] = set()
        #: The helper's own cgroup (``cgroup.procs`` of it), where it steps back to after
        #: starting a command inside an attempt's cgroup; None: not found.
        self.home = own_cgroup_procs()
        self.me = str(os.getpid()).encode()
        #: Clock ticks since boot at the last start, when the start fell within one tick
        #: (its start time, known without reading ``/proc``); None: read it.
        self.born: int | None = None
        #: Whether a program is on a job's ``PATH`` (commands born in their cgroup).
        self.on_path = OnPath()
        #: Lines for the daemon's log not sent (:meth:`notice`).
        self.notices: list[str] = []

    def start_gated(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        log: str,
        creds: tuple[int, int, list[int]] | None,
        gate: bool,
        cg: str | None,
        files: dict[str, str],
        nice: int | None,
    ) -> tuple[int, str | None, str | None]:
        """Start the command held at its gate (when it has one), set its niceness, move
        it into its cgroup, let it go; without a gate, start it in its cgroup from birth
        (:meth:`start_inside`). Returns (pid, cgroup it is in, why none)."""
        cg, error = self.make(cg, files)
        if not gate:
            return self.start_inside(argv, env, cwd, log, creds, cg, error)
        if cg is not None and self.native is not None and self.native.takes_gated(argv):
            try:
                done = self.start_limited(argv, env, log, cg, nice)
            except BaseException:
                self.drop(cg)
                raise
            if done is not None:
                return done
        held = os.pipe2(os.O_CLOEXEC)
        try:
            out = self.open_log(log)
            try:
                pid = self.start(argv, env, cwd, out, held[0], creds)
            finally:
                os.close(out)
        except BaseException:
            if cg is not None:
                self.drop(cg)
            os.close(held[1])
            raise
        finally:
            os.close(held[0])
        return self.let_go(pid, held[1], cg, error, nice)

    def let_go(
        self, pid: int, gate: int, cg: str | None, error: str | None, nice: int | None
    ) -> tuple[int, str | None, str | None]:
        """Set the niceness of the command held at ``gate``, move it into ``cg``, open
        the gate (spawnsys.release); a cgroup it could not enter is removed."""
        try:
            moved, error = release(pid, cg, error, nice)
        except Refused:
            if cg is not None:
                self.drop(cg)  # removed already; a slot leaves the pool
            raise
        finally:
            open_gate(gate)  # after a refusal the command is killed already
        if cg is not None and moved is None:
            self.drop(cg)
        return pid, moved, error

    def make(self, cg: str | None, files: dict[str, str]) -> tuple[str | None, str | None]:
        """The attempt's cgroup (asked for: ``cg``): a slot of the pool, else (no pool, or
        it is full) ``cg`` made here (spawnsys.make_cgroup); (None, why) without one;
        raises Refused."""
        if self.pool is not None and cg is not None and self.pool.has_room():
            return self.pool.take(files)
        return make_cgroup(cg, files)

    def start_inside(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        log: str,
        creds: tuple[int, int, list[int]] | None,
        cg: str | None,
        error: str | None,
    ) -> tuple[int, str | None, str | None]:
        """Start the command in its cgroup (no limits, no niceness: no gate). A process
        starts in its parent's cgroup, so the helper steps into the attempt's for the
        ``posix_spawn`` and back out: the command is in it before it runs, with no gate,
        no trampoline ``exec`` and no move of the command (issue 17). Limits keep the
        gate: the helper is never inside a cgroup whose limits could stop or kill it."""
        native = self.native
        if cg is not None and native is not None and native.into:
            born = None
            if native.takes(argv):
                born = self.start_into(argv, env, log, cg)
            elif creds is None:
                born = self.start_plain_into(argv, env, cwd, log, cg)
            if born is not None:
                return born
        return self.step_in_start(argv, env, cwd, log, creds, cg, error)

    def step_in_start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        log: str,
        creds: tuple[int, int, list[int]] | None,
        cg: str | None,
        error: str | None,
    ) -> tuple[int, str | None, str | None]:
        """:meth:`start_inside` without ``clone3``: the helper steps into ``cg`` for the
        start and back out."""
        inside = False
        try:
            out = self.open_log(log)
            try:
                if cg is not None:
                    inside, error = self.step_in(cg)
                try:
                    pid = self.start(argv, env, cwd, out, self.devnull, creds)
                finally:
                    if inside:
                        self.step_out(str(cg))
            finally:
                os.close(out)
        except BaseException:
            if cg is not None:
                self.drop(cg)
            raise
        return pid, (cg if inside else None), error

    def start_into(
        self, argv: list[str], env: dict[str, str], log: str, cg: str
    ) -> tuple[int, str | None, str | None] | None:
        """:meth:`start_inside` with ``clone3`` into the cgroup (spawnsys.Native): the
        command is born in it and the helper never enters it (no ``cgroup.procs`` write
        in, none out). A cgroup the kernel will not start it in is removed and the
        command starts outside it, its error reported (as :meth:`step_in`'s). None: the
        kernel killed it at its birth (:meth:`born_killed`): start it the other way."""
        try:
            out = self.open_log(log)
        except BaseException:
            self.drop(cg)
            raise
        try:
            try:
                fd, opened = self.dir_fd(cg)
                try:
                    return self.start(argv, env, None, out, self.devnull, None, fd), cg, None
                finally:
                    if opened:
                        os.close(fd)
            except BornKilled:
                self.born_killed(cg)
                return None
            except OSError as exc:  # no process was made: it is empty
                self.drop(cg)
                error = f"cannot enter {cg}: {exc}"
            return self.start(argv, env, None, out, self.devnull, None), None, error
        except BaseException:
            self.drop(cg)
            raise
        finally:
            os.close(out)

    def start_plain_into(
        self, argv: list[str], env: dict[str, str], cwd: str | None, log: str, cg: str
    ) -> tuple[int, str | None, str | None] | None:
        """A command of the daemon's own user in its cgroup, born there by ``clone3`` in
        the launcher's words (spawnsys.Native: no ``exec`` of the launcher), not with the
        helper stepping into the cgroup and out around a ``posix_spawn`` (two writes of
        ``cgroup.procs``, each a migration: ~45 µs of the helper's CPU per start, issue
        17, docs/benchmarks.md "Cgroup pool"). As :meth:`start` would: the program is
        looked up on the job's ``PATH`` first (not found: the same error, no process
        made; spawnsys.OnPath: the file found last time checked first) and the directory
        is entered by the helper (the same user); the command's words are unchanged.
        None as :meth:`start_into`."""
        assert self.native is not None
        try:
            self.on_path.check(argv[0], env)
            if cwd is not None:
                os.chdir(cwd)
        except BaseException:
            self.drop(cg)
            raise
        return self.start_into([*self.native.own_words(), *argv], env, log, cg)

    def start_limited(
        self, argv: list[str], env: dict[str, str], log: str, cg: str, nice: int | None
    ) -> tuple[int, str | None, str | None] | None:
        """A command with limits or a niceness, without its gate: born in its cgroup by
        ``clone3`` (the limit files are written already), its niceness set in the child
        before the drop (spawnsys.Native): no gate, no launcher ``exec``, no move. None:
        the kernel would not start it there, or killed it at its birth
        (:meth:`born_killed`): it takes the gate's way; raises :class:`Refused` when the
        niceness could not be set (nothing ran)."""
        ungated = [*argv[:7], "", *argv[8:]]
        out = self.open_log(log)
        try:
            fd, opened = self.dir_fd(cg)
            try:
                pid = self.start(ungated, env, None, out, self.devnull, None, fd, nice)
            finally:
                if opened:
                    os.close(fd)
        except Refused:
            raise
        except BornKilled:
            self.born_killed(cg)
            return None
        except OSError:
            return None
        finally:
            os.close(out)
        return pid, cg, None

    def born_killed(self, cg: str) -> None:
        """The kernel killed a command ``clone3`` started into ``cg`` at its birth
        (spawnnative.BornKilled): whose kill sequence moved? A new cgroup beside it
        tells. Killed there too: this helper's own cgroup's, so every new cgroup would
        kill every command: ``clone3`` is off for good (:meth:`clone3_off`). Else
        ``cg``'s (a ``cgroup.kill`` written in it from outside): a slot leaves the pool
        at its attempt's end. Either way the caller starts the command the other way, in
        ``cg``, so no attempt is lost (issue 17)."""
        assert self.native is not None
        if kills_at_birth(self.native, f"{cg}.probe"):
            self.clone3_off()
        elif self.pool is not None:
            self.pool.retire(cg)

    def probe(self) -> None:
        """At the helper's start, before any command: may commands be born in new
        cgroups (slots) by ``clone3`` from here? One ``/bin/true`` into a new one tells
        (spawnnative.kills_at_birth); killed at its birth: :meth:`clone3_off`."""
        native, pool = self.native, self.pool
        if native and native.into and pool and kills_at_birth(native, f"{pool.prefix}probe"):
            self.clone3_off()

    def clone3_off(self) -> None:
        """Start no command by ``clone3`` into its cgroup any more (the helper steps into
        it, or moves the command held at its gate) and tell the daemon why, once."""
        assert self.native is not None
        if self.native.into is None:
            return
        self.native.into = None
        home = "unknown" if self.home is None else os.path.dirname(self.home)
        self.notice(CLONE3_OFF.format(pid=os.getpid(), cgroup=home))

    def notice(self, line: str) -> None:
        """A line for the daemon's log (spawner.Helper sends it); kept here without one."""
        self.notices.append(line)

    def dir_fd(self, cg: str) -> tuple[int, bool]:
        """``cg``'s directory, open for ``clone3``, and whether it was opened here (to be
        closed): a slot's is held open by the pool."""
        fd = None if self.pool is None else self.pool.dir_fd(cg)
        if fd is not None:
            return fd, False
        return os.open(cg, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), True

    def drop(self, cg: str) -> None:
        """Remove ``cg``, in which no process ran (a start failed): a slot leaves the pool."""
        if self.pool is not None:
            self.pool.discard(cg)
        else:
            rmdir_empty(cg)

    def step_in(self, cg: str) -> tuple[bool, str | None]:
        """Move the helper into ``cg``: (True, None), or (False, why) with ``cg`` removed
        (the command then starts outside it; its tree is found in ``/proc``)."""
        if self.home is None:
            self.drop(cg)
            return False, "the spawn helper's own cgroup is unknown"
        try:
            write_bytes(os.path.join(cg, "cgroup.procs"), self.me)
        except OSError as exc:
            self.drop(cg)
            return False, f"cannot enter {cg}: {exc}"
        return True, None

    def step_out(self, cg: str) -> None:
        """Back to the helper's own cgroup. Failing that, the helper ends (the daemon
        starts a new one): it must never start a command in another attempt's cgroup."""
        assert self.home is not None
        try:
            write_bytes(self.home, self.me)
        except OSError as exc:
            raise SystemExit(f"jobctl spawn helper: cannot leave {cg}: {exc}") from exc

    def open_log(self, path: str) -> int:
        """Create (0600, never through a symlink) and open the attempt's log."""
        folder = os.path.dirname(path)
        if folder not in self.made_dirs:
            os.makedirs(folder, 0o700, exist_ok=True)
            self.made_dirs.add(folder)
        try:
            return os.open(path, _LOG_FLAGS, 0o600)
        except FileNotFoundError:  # the directory was removed meanwhile
            os.makedirs(folder, 0o700, exist_ok=True)
            return os.open(path, _LOG_FLAGS, 0o600)

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        out: int,
        stdin: int,
        creds: tuple[int, int, list[int]] | None,
        cgroup: int = -1,
        nice: int | None = None,
    ) -> int:
        """Start the command; ``cgroup`` and ``nice`` (a launcher request through
        spawnsys.Native only): born in the cgroup whose directory it is open on, with
        that niceness."""
        if creds is not None:
            if SETPRIV is None:
                self.born = None
                return fork_exec(argv, env, out, stdin, creds)
            argv = [*drop_argv(SETPRIV, creds), *argv]
        if self.native is not None and self.native.takes(argv):
            # the library reads the clock around the child's birth, not its exec: a
            # window of microseconds, so /proc is read almost never (launch.c)
            pid = self.native.spawn(argv, env, stdin, out, cgroup, nice)
            self.born = self.native.born
            return pid
        before, pid = posix_spawn(argv, env, cwd, out, stdin)
        # The kernel stamped the child between the two readings: within one tick, that
        # tick is its start time (no /proc read; across a tick boundary, spawn() reads it).
        after = boot_ticks()
        self.born = before if before == after else None
        return pid

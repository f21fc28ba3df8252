"""The spawn helper: a small process that starts the daemon's commands and reaps them.

Why a separate process: starting a command from the daemon meant ``Popen`` on the event
loop, ~300 µs of the loop's time per command, and for a root daemon running a command as
another user a full ``fork`` of a large process (CPython cannot use ``vfork`` when the
child changes its credentials). This helper is started by the daemon at start-up with
nothing but the standard library loaded (a few MB), so the daemon only sends a request
and reads answers: the exec waits, the log's ``open``, the cgroup's files and the start
time's reading happen here. How a command is started (``posix_spawn``, the launcher or
its library, ``setpriv`` and the trampoline, a ``fork``; at its gate or born in its
cgroup) is :class:`Starter`'s (engine/spawnstart.py), which :class:`Helper` is; this
module is the helper's loop and protocol.

Protocol (``SOCK_SEQPACKET`` socketpair; each message a ``marshal``-ed list of the tuples
below: the requests of one turn of the daemon's loop, the answers and exits of one pass of
the helper's, issue 17; both ends are the daemon's own code at the daemon's own uid):

    daemon -> helper  ("spawn", rid, argv, env, cwd|None, log, creds|None, gate,
                       cgroup|None, {limit file: value}, nice|None)
                      ("release", cgroup, reuse)                [pool2; pool1: no reuse]
    helper -> daemon  ("started", rid, pid, start_time, cgroup entered|None, error|None)
                      ("failed", rid, kind, errno, strerror, filename)
                      ("exit", pid, returncode, cgroup removed, log size, log tail,
                       cgroup kept)                             [pool1: the last field]
                      ("notice", logfmt line)     [a warning for the daemon's log]

Cgroup pool (:data:`POOL`, engine/cgpool.py): a daemon that passes ``pool2:PREFIX`` as
the helper's sixth argument gets its attempts' cgroups from the helper's pool (the
``cgroup`` of a request is then only asked for, the answer names the one used); an exit
that leaves its cgroup empty reports it *kept*, and the daemon sends ``release`` with
that cgroup once no stop of the attempt can target it any more; only then is it used
again, and only if ``reuse`` (no ``cgroup.kill`` was written in it: the kernel would
SIGKILL every command started into it by ``clone3``; else the helper removes it). The two
ends are versioned by that argument and those fields: a helper of another version never
gets the argument it does not know (an older one ignores it: it never reports a cgroup
kept, so the daemon never sends it a ``release``; a ``pool1`` helper, which would reuse a
killed slot, is not given ``pool2``), the daemon hands back only what was reported kept,
and a ``pool1`` daemon's ``release`` (no ``reuse``) is taken as before.

``gate``: the command (the launcher or trampoline) waits reading its stdin, a pipe
the helper holds, until the helper wrote a line: after ``setpriority`` (``nice``) and the
move into ``cgroup`` (made here, ``limit files`` written first). A gate closed without
that line (the helper died in between) makes the trampoline end with ``GATE_SHUT``
(engine/commandline.py), never run the command without its limits. ``kind``
``refused``: a limit could not be applied (the daemon's ``StartRefused``). A cgroup that
could not be made or entered when the job has no limits in it is reported as ``error``
(its tree is found in ``/proc``).
No ``gate`` with a ``cgroup``: the command is born in it (the helper is inside it only for
the ``posix_spawn``; if it cannot step back out it ends, never to start another attempt's
command there).

The helper is the commands' parent. An exit is reported *before* the child is reaped
(``waitid`` with ``WNOWAIT``), with the log's size and its last :data:`TAIL_BYTES` read
here at the exit (issue 17: no ``open``/``stat`` of the log in the daemon; ``-1``: it
could not be read, the daemon reads it), so a report is never lost: if the helper dies, its
unreaped children (running or exited) are re-parented to the daemon, which is a child
subreaper (engine/spawnclient.py) and waits for them itself. The helper is a subreaper
too, so what a command leaves behind (a double fork) is reaped here, not by the daemon.
End-of-file on the socket (the daemon is gone) ends the helper; its running commands go
on, as they did without a helper, and the next daemon's recovery finds them.

Run as ``python -m jobctl.engine.spawner FD UMASK NOFILE TAG LIBRARY [POOL]``
(``NOFILE`` empty: keep the open-file soft limit; ``TAG`` names the daemon's helpers in
``/proc``; ``LIBRARY`` empty: none, every launcher request execs the launcher, see
spawnsys.Native; ``POOL``: see above); it imports nothing of jobctl but its siblings.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import resource
import selectors
import signal
import socket
import sys
from typing import Any

from jobctl.engine.cgpool import Pool
from jobctl.engine.spawnstart import Starter
from jobctl.engine.spawnsys import (
    MAX_MESSAGE,
    SETPRIV,
    TAIL_BYTES,
    Native,
    Refused,
    chunks,
    drain,
    drop_argv,
    filename_text,
    fork_exec,
    load_native,
    log_end,
    own_cgroup_procs,
    recv,
    resolve,
    returncode,
    rmdir_empty,
    set_subreaper,
    start_time,
)

#: Re-exported: tests, benchmarks and spawnclient know these as spawner.*.
__all__ = [
    "MAX_MESSAGE",
    "POOL",
    "SETPRIV",
    "TAIL_BYTES",
    "Helper",
    "chunks",
    "drop_argv",
    "fork_exec",
    "main",
    "resolve",
    "set_subreaper",
]

#: The pool protocol's version: ``POOL:PREFIX`` as the sixth argument turns the pool on
#: (``pool2``: a ``release`` says whether the slot may be used again, issue 17).
POOL = "pool2"
#: The versions this helper serves (an older daemon's ``pool1`` too).
POOLS = ("pool1", POOL)
#: Blocked during a pass of the helper's loop (:meth:`Helper.serve`).
CHILD = {signal.SIGCHLD}


class Helper(Starter):
    """The helper's side: read requests, start commands (:class:`Starter`), report
    starts and exits."""

    def __init__(
        self, sock: socket.socket, native: Native | None = None, pool: Pool | None = None
    ) -> None:
        super().__init__(native, pool)
        self.sock = sock
        #: Commands whose exit the daemon wants: their cgroup (None: none) and log.
        self.children: dict[int, tuple[str | None, str]] = {}
        self.out: list[tuple[Any, ...]] = []  # answers of this pass, sent by flush()

    def send(self, message: tuple[Any, ...]) -> None:
        self.out.append(message)

    def notice(self, line: str) -> None:
        """A line for the daemon's log, in its logfmt (``("notice", line)``)."""
        self.send(("notice", line))

    def flush(self) -> None:
        """Send this pass's answers and exits, in order, as few messages as fit."""
        if not self.out:
            return
        self.sock.setblocking(True)  # the daemon reads as fast as it can; wait if full
        try:
            for chunk in chunks(self.out):
                self.sock.send(chunk)
        finally:
            self.sock.setblocking(False)
            self.out = []

    def serve(self) -> None:
        """Until the daemon closes its end."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, "sock")
        sel.register(wake_r, selectors.EVENT_READ, "child")
        while True:
            ready = sel.select()
            # The exits of a pass wait for its end as one pending SIGCHLD (one wake-up
            # after it), not a signal each that interrupts the starts (issue 17: ~one a
            # start, each a signal frame, a handler and a wake-up write); every command
            # starts with an empty mask all the same (posix_spawn's setsigmask, launch.c,
            # fork_exec).
            signal.pthread_sigmask(signal.SIG_BLOCK, CHILD)
            try:
                if not self.serve_ready(ready, wake_r):
                    return
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, CHILD)

    def serve_ready(self, ready: list[tuple[selectors.SelectorKey, int]], wake_r: int) -> bool:
        """One pass: exits, then requests, then the answers sent; False at end-of-file."""
        for key, _ in ready:
            if key.data == "child":
                drain(wake_r)
                self.reap()
            elif not self.read_requests():
                self.flush()
                if self.pool is not None:
                    self.pool.close()
                return False
        self.flush()
        return True

    def read_requests(self) -> bool:
        """Serve every request waiting on the socket; False at end-of-file."""
        while True:
            try:
                data, fds = recv(self.sock)
            except BlockingIOError:
                return True
            except ConnectionResetError:
                return False
            if not data:
                return False
            for fd in fds:  # none is sent: never keep one
                os.close(fd)
            for req in marshal.loads(data):
                if req[0] == "release":
                    if self.pool is not None:
                        self.pool.release(req[1], len(req) < 3 or bool(req[2]))
                else:
                    self.spawn(req)
            self.reap()  # a quick command may be done already

    def spawn(self, req: tuple[Any, ...]) -> None:
        _, rid, argv, env, cwd, log, creds, gate, cg, files, nice = req
        try:
            pid, cg, error = self.start_gated(argv, env, cwd, log, creds, gate, cg, files, nice)
        except OSError as exc:
            self.send(("failed", rid, "os", exc.errno, exc.strerror, filename_text(exc.filename)))
            return
        except Refused as exc:
            self.send(("failed", rid, "refused", 0, str(exc), None))
            return
        except (ValueError, TypeError) as exc:
            self.send(("failed", rid, type(exc).__name__, 0, str(exc), None))
            return
        self.children[pid] = (cg, log)
        born = self.born if self.born is not None else start_time(pid)
        self.send(("started", rid, pid, born, cg, error))

    def reap(self) -> None:
        """Report every exited command, then reap it; reap strays (orphans) silently.
        A command's cgroup is removed first if its exit left it empty, or kept for the
        daemon's hand-back if it is a slot of the pool and its command was not SIGKILLed
        (the report says which; one left populated is the daemon's to kill and remove)."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            if pid in self.children:
                cg, log = self.children.pop(pid)
                code = returncode(info.si_code, info.si_status)
                killed = code == -signal.SIGKILL  # the slot may be marked: used once only
                kept = None if cg is None or self.pool is None else self.pool.exited(cg, killed)
                removed = kept is None and cg is not None and rmdir_empty(cg)
                self.send(("exit", pid, code, removed, *log_end(log), bool(kept)))
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def main(argv: list[str]) -> int:
    fd, umask, nofile = int(argv[0]), int(argv[1], 8), argv[2]
    os.umask(umask)
    if nofile:  # what the daemon's commands get: the limit it started with
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(nofile), hard))
    os.chdir("/")
    set_subreaper()
    sock = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    home = own_cgroup_procs()
    native = load_native(argv[4] if len(argv) > 4 else "", home and os.path.dirname(home))
    kind, _, prefix = (argv[5] if len(argv) > 5 else "").partition(":")
    helper = Helper(sock, native, Pool(prefix) if kind in POOLS and prefix else None)
    helper.probe()
    helper.flush()  # a notice of the probe, at once
    helper.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

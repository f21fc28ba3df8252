"""The daemon's end of the spawn helper (engine/spawner.py): requests, answers, restarts.

Every start is one request to the helper; the answer (pid and start time, or the error)
resolves the starting task's future, and a later ``exit`` report the attempt's exit
future. Requests made in one turn of the event loop go out in one message (answers come
back grouped the same way); nothing here waits for an exec.

The helper may die (``kill -9``, the OOM killer). The daemon is a child subreaper, so
the helper's children (the commands it started and has not reaped) become the daemon's:
each running command is then waited for by the daemon itself (a pidfd on the loop, then
``waitpid``), with its real exit status. A request the helper had not answered is
settled by evidence, never by guessing: once no half-started child (one still running
the helper's program) is left, a process carrying the attempt's markers in its
environment is the command (adopted, it runs on), and no such process means it never
started (the attempt fails as "cannot start for now", which costs no budget and runs
again). Then a new helper is started. Processes re-parented to the daemon that are not
commands (what a command left behind when its helper died) are reaped from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import marshal
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl.domain.models import Claim
from jobctl.engine import cgroup, launcher, limits, spawner
from jobctl.engine import process as proc_mod
from jobctl.engine.cgroup import Cgroup, Cgroups
from jobctl.engine.helperdead import cgroup_of, find_command, reap_strays, settle
from jobctl.engine.helperio import Backoff, LastWords, helper_env
from jobctl.logfmt import logval

log = logging.getLogger("jobctl.executor")
#: Seconds between looks for re-parented strays once a helper has died.
STRAY_EVERY = 5.0
#: Most start requests in one message to the helper.
BATCH_MAX = 64


@dataclass
class Started:
    """A command the helper started (satisfies process.Child)."""

    pid: int
    start_time: int | None
    exited: asyncio.Future[int] = field(repr=False)
    #: The cgroup the command is in (the helper made it and moved it in), or None.
    cgroup: str | None = None
    #: Why it has none although one was asked for (the tree is found in /proc), or None.
    cgroup_error: str | None = None
    #: The helper removed the cgroup at the exit (it was empty): nothing left to end.
    cgroup_removed: bool = False
    #: The log's size and end read by the helper at the exit (None: the daemon reads it,
    #: e.g. a command adopted after the helper died).
    log_end: tuple[int, bytes] | None = None
    #: Hands the cgroup back to the helper's pool (it reported it kept, empty, at the
    #: exit): called once no stop of the attempt can target it (proctree.end), with
    #: whether it may be used again (False: its ``cgroup.kill`` was written, the helper
    #: removes it); None: the daemon ends and removes the cgroup itself.
    release: Callable[[bool], None] | None = field(default=None, repr=False)


@dataclass
class _Request:
    rid: int
    message: tuple[Any, ...]
    markers: dict[str, str]
    answer: asyncio.Future[Started]
    #: The cgroup asked for: an adopted command (the helper died) may be in it.
    cgroup: str | None = None


@dataclass(frozen=True)
class Limits:
    """Where the helper puts the command: the attempt's cgroup (made there, with these
    limit files) and its niceness."""

    cgroup: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    nice: int | None = None

    @property
    def gate(self) -> bool:
        """Whether the command waits at its gate (the trampoline) until the helper set
        its niceness and moved it into its cgroup: only for a niceness or limits. A
        cgroup alone needs none: the command is born in it (issue 17, engine/spawner.py)."""
        return self.nice is not None or bool(self.files)


class SpawnHelper:
    """Starts commands through a helper process; restarts it when it dies."""

    def __init__(
        self, umask: int, nofile: int | None, tag: str = "", pool: str | None = None
    ) -> None:
        self._umask, self._nofile, self._tag = umask, nofile, tag
        #: The attempts' directory and name prefix of the helper's cgroup pool
        #: (engine/cgpool.py: ``cgroup.Cgroups.pool_prefix``), or None: one per attempt.
        self._pool = pool
        #: ("release", cgroup, may it be used again), not sent yet
        self._releases: list[tuple[str, str, bool]] = []
        #: The start-up launcher (engine/launcher.py) commands that drop privileges or
        #: wait at a gate go through, or None: the trampoline (and the helper's setpriv).
        self.launcher = launcher.default()
        #: The same code as a library the helper starts those commands with (no exec of
        #: the launcher), or None (engine/launcher.py ``library``).
        self.library = launcher.library(self.launcher)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        #: The helper's stderr, read here: why it died (engine/helperio.py).
        self._words = LastWords()
        #: How soon a dead helper's successor starts (no restart loop of one that cannot).
        self.backoff = Backoff()
        self._rids = 0
        self._pending: dict[int, _Request] = {}  # sent, not answered
        self._queue: deque[_Request] = deque()  # not sent yet (socket full, restarting)
        self._exits: dict[int, Started] = {}  # started, exit not seen
        self._adopted: set[int] = set()  # commands the daemon waits for itself
        self._restarting: asyncio.Task[None] | None = None
        self._strays: asyncio.Task[None] | None = None
        self._closed = False
        self._started_at = 0.0
        self.restarts = 0
        self.messages = 0  # messages sent to the helper (tests and benchmarks read it)
        #: Called before requests are sent: the crash witness writes the lines of this
        #: loop turn first (an attempt's ``starting`` precedes its start, witness.py).
        self.before_send: Callable[[], None] = lambda: None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the helper (the daemon becomes a subreaper first, see the module doc)."""
        self._loop = loop
        self._started_at = time.monotonic()
        spawner.set_subreaper()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (ours, theirs):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        nofile = "" if self._nofile is None else str(self._nofile)
        argv = [sys.executable, "-m", "jobctl.engine.spawner", str(theirs.fileno()),
                f"{self._umask:o}", nofile, self._tag, self.library or ""]  # fmt: skip
        if self._pool is not None:  # the helper's pool, by the protocol's version
            argv.append(f"{spawner.POOL}:{self._pool}")
        self._releases.clear()  # a dead helper's slots: its successor removes them
        said = self._words.open(loop)  # never the daemon's stderr (engine/helperio.py)
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=said,
                pass_fds=(theirs.fileno(),), start_new_session=True, env=helper_env(),
            )  # fmt: skip
        finally:
            theirs.close()
            os.close(said)
        ours.setblocking(False)
        self._sock = ours
        loop.add_reader(ours, self._on_readable)
        self._flush()

    async def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        log_path: str,
        creds: tuple[int, int, list[int]] | None,
        markers: dict[str, str],
        lim: Limits | None = None,
    ) -> Started:
        """Start one command; raises OSError/ValueError as Popen would, StartRefused when
        a limit of ``lim`` cannot be applied."""
        assert self._loop is not None, "start() first"
        lim = lim or Limits()
        self._rids += 1
        rid = self._rids
        msg = ("spawn", rid, argv, env, cwd, log_path, creds, lim.gate, lim.cgroup, lim.files,
               lim.nice)  # fmt: skip
        req = _Request(rid, msg, markers, self._loop.create_future(), lim.cgroup)
        self._queue.append(req)
        if len(self._queue) == 1:
            self._loop.call_soon(self._flush)  # one batch per loop turn
        return await req.answer

    def release(self, path: str, reuse: bool = True) -> None:
        """Hand the cgroup ``path`` back to the helper's pool with the next start request
        (ahead of it): no message, and no wake-up of the helper, of its own; until a start
        comes the helper has no use for it (it removes the cgroup when the daemon goes).
        ``reuse`` False: the helper removes it (its ``cgroup.kill`` was written)."""
        self._releases.append(("release", path, reuse))

    def _flush(self) -> None:
        if self._sock is None or self._restarting is not None:
            return
        if self._queue:
            self.before_send()
        while self._queue:
            data, n, r = self._next_message()
            try:
                self._sock.send(data)
            except BlockingIOError:
                assert self._loop is not None
                self._loop.add_writer(self._sock, self._writable)
                return
            except OSError:  # the helper is gone: the reader sees it and restarts
                return
            self.messages += 1
            del self._releases[:r]
            for _ in range(n):
                req = self._queue.popleft()
                self._pending[req.rid] = req

    def _next_message(self) -> tuple[bytes, int, int]:
        """The hand-backs and first queued requests as one message (issue 17: one send
        and one wake-up of the helper per loop turn, not per start), and how many
        requests and hand-backs it holds (the hand-backs first: a start may reuse one)."""
        r = min(len(self._releases), BATCH_MAX * 4)
        n = min(len(self._queue), BATCH_MAX)
        while True:
            data = marshal.dumps([*self._releases[:r], *(self._queue[i].message for i in range(n))])
            if n <= 1 or len(data) <= spawner.MAX_MESSAGE // 2:
                return data, n, r
            n //= 2

    def _writable(self) -> None:
        assert self._loop is not None and self._sock is not None
        self._loop.remove_writer(self._sock)
        self._flush()

    def _on_readable(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(spawner.MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._helper_died()
                return
            for msg in marshal.loads(data):
                self._handle(msg)

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "notice":  # the helper's warning, a logfmt line (spawnstart.CLONE3_OFF)
            log.warning("%s", msg[1])
            return
        if kind == "exit":
            child = self._exits.pop(msg[1], None)
            if child is not None and not child.exited.done():
                child.cgroup_removed = msg[3]
                if len(msg) > 6 and msg[6] and child.cgroup is not None:
                    child.release = functools.partial(self.release, child.cgroup)
                child.log_end = None if msg[4] < 0 else (msg[4], msg[5])
                child.exited.set_result(msg[2])
            return
        req = self._pending.pop(msg[1], None)
        if req is None or req.answer.done():
            return
        if kind == "started":
            req.answer.set_result(self._started(*msg[2:]))
        elif msg[2] == "os":
            req.answer.set_exception(OSError(msg[3], msg[4], msg[5]))
        elif msg[2] == "refused":
            req.answer.set_exception(limits.StartRefused(msg[4]))
        else:
            req.answer.set_exception(ValueError(msg[4]))

    def _started(self, pid: int, start: int | None, cg: str | None, error: str | None) -> Started:
        assert self._loop is not None
        child = Started(pid, start, self._loop.create_future(), cg, error)
        self._exits[pid] = child
        return child

    def _helper_died(self) -> None:
        assert self._loop is not None and self._sock is not None
        self._loop.remove_reader(self._sock)
        with contextlib.suppress(Exception):
            self._loop.remove_writer(self._sock)
        self._sock.close()
        self._sock = None
        if self._closed:
            return
        self._restarting = self._loop.create_task(self._recover())

    async def _recover(self) -> None:
        """Adopt the dead helper's commands, settle its unanswered requests, restart it."""
        assert self._loop is not None and self._proc is not None
        dead = self._proc
        code = await asyncio.to_thread(dead.wait)  # its children are re-parented by now
        pause = self.backoff.after(time.monotonic() - self._started_at)
        log.error("event=spawn_helper_died pid=%s code=%s running=%d unanswered=%d said=%s "
                  "restart_in=%g", dead.pid, code, len(self._exits), len(self._pending),
                  logval(self._words.take()), pause)  # fmt: skip
        for pid, child in list(self._exits.items()):
            self._adopt(pid, child.exited)
        self._exits.clear()
        await asyncio.to_thread(settle, dead.pid, self._tag)
        for req in list(self._pending.values()):
            await self._settle_request(req)
        self._pending.clear()
        if self._strays is None:
            self._strays = self._loop.create_task(self._reap_strays())
        self.restarts += 1
        if pause:  # dying at once: no hot loop
            await asyncio.sleep(pause)
        self._restarting = None
        if not self._closed:
            self.start(self._loop)

    async def _settle_request(self, req: _Request) -> None:
        """An unanswered request: its command runs (adopt it) or never started."""
        found = await asyncio.to_thread(find_command, req.markers)
        if found is None:
            error = OSError(errno.EAGAIN, "the spawn helper died before the command started")
            req.answer.set_exception(error)
            return
        assert self._loop is not None
        fut: asyncio.Future[int] = self._loop.create_future()
        self._adopt(found, fut)
        log.warning("event=spawn_adopted pid=%s", found)
        # Past its gate, it is in its cgroup if it has one (a gate never opened ends it):
        # the one /proc names (a slot of the pool is not the one asked for).
        cg = None if req.cgroup is None else cgroup_of(found)
        req.answer.set_result(Started(found, proc_mod.process_start_time(found), fut, cg))

    def _adopt(self, pid: int, fut: asyncio.Future[int]) -> None:
        """Wait for ``pid`` (now the daemon's child) ourselves: a pidfd, then waitpid."""
        assert self._loop is not None
        loop = self._loop
        self._adopted.add(pid)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = -1

        def done() -> None:
            if pidfd >= 0:
                loop.remove_reader(pidfd)
                os.close(pidfd)
            self._adopted.discard(pid)
            try:
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # reaped by the helper after its report was read
                code = -9
            if not fut.done():
                fut.set_result(code)

        if pidfd < 0:
            loop.call_soon(done)
        else:
            loop.add_reader(pidfd, done)

    async def _reap_strays(self) -> None:
        """Reap processes re-parented to the daemon that are not commands it waits for."""
        while not self._closed:
            keep = set(self._adopted)
            if self._proc is not None:
                keep.add(self._proc.pid)
            await asyncio.to_thread(reap_strays, keep)
            await asyncio.sleep(STRAY_EVERY)

    def close(self) -> None:
        """Close the socket: the helper ends (its running commands go on)."""
        self._closed = True
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock)
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self._sock)
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        self._words.close()
        if self._strays is not None:
            self._strays.cancel()


async def spawn(
    helper: SpawnHelper,
    claim: Claim,
    log_path: str | Path,
    lease_owner: str,
    loop: asyncio.AbstractEventLoop,
    log_cap: int | None = None,
    cgroups: Cgroups | None = None,
) -> proc_mod.Running:
    """process.spawn through the helper: the same guarantees, the work done elsewhere.

    The helper makes the attempt's cgroup and starts the command in it (with limits or
    a niceness: sets them and moves the command in while it waits at its gate), and
    removes the cgroup when its exit leaves it empty: no file of /proc or cgroupfs is
    touched here, and no thread is used. Commands that drop to their owner, wait at a
    gate or carry the output cap go through the helper's launcher when there is one."""
    blocks = None if log_cap is None else max(1, -(-log_cap // 512))
    res = claim.job.spec.resources
    limits.check(res, cgroups)
    name = None if cgroups is None else cgroup.attempt_name(
        lease_owner, claim.job.id, claim.generation)  # fmt: skip
    lim = Limits(
        None if cgroups is None else f"{cgroups.base}/{name}",  # a string: no Path per start
        res.cgroup_files() if res else {},
        res.nice if res else None,
    )
    markers = proc_mod.attempt_markers(claim.job.id, lease_owner, claim.generation)
    # The helper has the daemon's original open-file limit already (no ulimit -n).
    argv, env, cwd, creds = proc_mod.command_line(
        claim, lease_owner, None, blocks, lim.gate, helper.launcher
    )
    child = await helper.spawn(argv, env, cwd, str(log_path), creds, markers, lim)
    if child.cgroup_error is not None:  # its tree is found by its markers
        log.warning("event=cgroup_failed job=%s error=%s", claim.job.id, child.cgroup_error)
    cg = None
    if child.cgroup is not None:
        cg = Cgroup(child.cgroup, cgroups.kill_file if cgroups else True)  # no Path yet
    start: asyncio.Future[int | None] = loop.create_future()
    start.set_result(child.start_time)
    cap = None if blocks is None else blocks * 512
    return proc_mod.Running(
        claim, child, child.exited, log_path, start, log_cap=cap, cgroup=cg, markers=markers
    )

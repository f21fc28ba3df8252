"""The crash witness: a small process that sees which commands outlived their daemon.

A command that takes its daemon down is gone (or going) when the daemon dies; a healthy
command that happened to run at a ``kill -9`` is still running at that instant, but may
well have finished by the time the next daemon looks (a restart takes a second or more).
So the evidence is taken at the instant of death, by a witness the daemon starts before
its first command: it waits on a pipe whose only writer is the daemon (the write end is
not inherited by commands), so end-of-file means the daemon is gone. A clean stop says
``bye`` first and the witness leaves quietly; otherwise, after :data:`SETTLE` seconds,
it lists the job ids whose commands (found by ``JOBCTL_LEASE_OWNER`` in their
environment, as recovery finds survivors) are still alive, writes them to
``<db>.witness/<owner>.json`` and exits. Start-up recovery reads that file
(:func:`witnessed`): a job whose command was alive at the daemon's death is no suspect
of the crash (docs/guarantees.md#crashes-and-poison-jobs).

The same pipe carries the daemon's word about each attempt (:class:`Witness`'s
``starting``, ``exited`` and ``done``, one numbered line each, never waited on; the lines
of one turn of the event loop go out in one write, and always before the spawn requests
of that turn, see :meth:`Witness.flush`): so the
file also says, of every attempt the daemon had not finished, whether its command can
have started (the daemon was about to spawn it and its log file, created just before the
fork, exists) and the exit status the daemon saw. A line lost because the pipe was full
leaves a gap in the numbers; the file then says the account is not ``complete``, and an
attempt it does not name is no longer taken as never started.

Run as ``python -m jobctl.engine.witness DIR OWNER`` with the pipe as stdin; it imports
nothing of jobctl, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

#: Seconds between the daemon's death and the look: a command that killed its daemon as
#: its last act has exited by then.
SETTLE = 0.05
BYE = b"bye"
#: Bytes the pipe may hold (F_SETPIPE_SZ; 1 MiB is Linux's default ceiling for a user):
#: thousands of lines, so a witness the scheduler leaves waiting loses none.
PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: A write of at most this many bytes to a pipe is atomic: a line arrives whole or not at all.
PIPE_BUF = 4096
#: Seconds between two reads of the pipe while the daemon lives (:func:`follow`): the
#: default 64 KiB pipe (F_SETPIPE_SZ refused) then holds ~500 attempts' lines, ~10,000
#: attempts a second before one is dropped.
DRAIN = 0.05


def witness_dir(db: Path) -> Path:
    """``<db>.witness`` beside the database's real file (jobctl.files keeps it private)."""
    real = Path(os.path.realpath(db))
    return real.with_name(real.name + ".witness")


def _file(folder: Path, owner: str, suffix: str = ".json") -> Path:
    return folder / (owner.replace("/", "_") + suffix)


def _quoted(path: str) -> str:
    """``json.dumps(path)``; a plain path (printable ASCII, no quote or backslash: every
    log path jobctl makes) is just put in quotes (issue 17: the JSON encoder was ~3% of
    the daemon's loop time during a burst, one call per attempt)."""
    if path.isascii() and path.isprintable() and '"' not in path and "\\" not in path:
        return f'"{path}"'
    return json.dumps(path)


class Witness:
    """The daemon's end: the pipe's write end and the witness process.

    Also the executor's crash feed: what it is about to start, what it saw end, and what
    it has finished with. Each is one line written without waiting (a full pipe drops it,
    and the numbering tells the witness so).
    """

    def __init__(self, db: Path, owner: str) -> None:
        folder = witness_dir(db)
        folder.mkdir(mode=0o700, exist_ok=True)
        self._gap: Path | None = _file(folder, owner, ".gap")  # made when a line is dropped
        self._seq = 0
        self._open = True
        self._lines: list[bytes] = []  # written at the end of this loop turn (flush)
        read, self._write = os.pipe()  # both non-inheritable: commands never hold the pipe
        # a lower pipe-max-size fails this: the default 64 KiB still holds hundreds of lines
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._write, _F_SETPIPE_SZ, PIPE_SIZE)
        os.set_blocking(self._write, False)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "jobctl.engine.witness", str(folder), owner],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(read)

    def starting(self, job_id: int, generation: int, log: str | Path) -> None:
        """The attempt's command is about to be spawned, its output going to ``log``."""
        self._send(f"i {job_id} {generation} {_quoted(os.fspath(log))}")

    def exited(self, job_id: int, generation: int, code: int) -> None:
        """The attempt's command ended with ``code`` (negative: killed by that signal)."""
        self._send(f"x {job_id} {generation} {code}")

    def done(self, job_id: int, generation: int) -> None:
        """The attempt's end is in the store (or was refused): nothing more to witness."""
        self._send(f"d {job_id} {generation}")

    def _send(self, text: str) -> None:
        self._seq += 1
        if not self._open:
            return
        line = f"{self._seq} {text}\n".encode()
        if len(line) > PIPE_BUF:  # a log path too long to be atomic: sent without it
            line = f"{self._seq} {' '.join(text.split(' ', 3)[:3])}\n".encode()
        self._lines.append(line)
        if len(self._lines) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a tool, a test): at once
                self.flush()

    def flush(self) -> None:
        """Write the lines of this loop turn: one ``write`` per :data:`PIPE_BUF` of whole
        lines (each atomic), instead of one per line (issue 17: each write wakes the
        witness, three per attempt). The spawn helper calls it before it sends the turn's
        requests (engine/spawnclient.py), and the executor before an inline spawn, so an
        attempt's ``starting`` line is in the pipe before its command can start."""
        lines, self._lines = self._lines, []
        chunk = b""
        for line in lines:
            if len(chunk) + len(line) > PIPE_BUF:
                if not self._write_chunk(chunk):
                    return
                chunk = b""
            chunk += line
        if chunk:
            self._write_chunk(chunk)

    def _write_chunk(self, chunk: bytes) -> bool:
        if not self._open:
            return False
        try:
            os.write(self._write, chunk)
        except BlockingIOError:  # full: a mark tells the witness (the numbering cannot
            self._mark_gap()  # when the lines lost are the last before a crash)
        except OSError:  # the witness is gone (killed): no evidence this time
            self._open = False
            return False
        return True

    def _mark_gap(self) -> None:
        if self._gap is not None:
            with contextlib.suppress(OSError):
                self._gap.touch(0o600)
            self._gap = None  # once is enough: the account stays incomplete

    def stop(self) -> None:
        """A clean stop: the witness leaves without writing anything."""
        self.flush()
        self._open = False
        try:
            os.set_blocking(self._write, True)
            os.write(self._write, b"\n" + BYE + b"\n")
        except OSError:  # the witness is gone already (systemd stops the whole cgroup)
            pass
        finally:
            os.close(self._write)
        self._proc.wait()


class CrashFeed(Protocol):
    """What the executor tells the crash witness about each attempt (see :class:`Witness`)."""

    def starting(self, job_id: int, generation: int, log: str | Path) -> None: ...
    def exited(self, job_id: int, generation: int, code: int) -> None: ...
    def done(self, job_id: int, generation: int) -> None: ...
    def flush(self) -> None: ...


class NoFeed:
    """The crash feed of an executor without a witness (tests, tools): says nothing."""

    def starting(self, job_id: int, generation: int, log: str | Path) -> None:
        pass

    def exited(self, job_id: int, generation: int, code: int) -> None:
        pass

    def done(self, job_id: int, generation: int) -> None:
        pass

    def flush(self) -> None:
        pass


@dataclass
class Feed:
    """The witness's account of the daemon's attempts, from the numbered lines."""

    seq: int = 0
    complete: bool = True
    #: (job id, generation) -> [log path, exit status]: each as its line wrote it (bytes,
    #: read by :meth:`evidence` only: issue 17, a JSON decode and an ``int`` per attempt
    #: were most of the witness's CPU), or None
    attempts: dict[tuple[int, int], list[bytes | None]] = field(default_factory=dict)

    def take(self, line: bytes) -> None:
        parts = line.split(b" ", 4)
        try:
            seq, kind, key = int(parts[0]), parts[1], (int(parts[2]), int(parts[3]))
        except (ValueError, IndexError):  # not a line of ours: the account is not whole
            self.complete = False
            return
        rest = parts[4] if len(parts) > 4 else None
        if kind == b"i":
            self.attempts[key] = [rest, None]
        elif kind == b"x" and key in self.attempts:
            self.attempts[key][1] = rest if rest is not None else b""
        elif kind == b"d":
            self.attempts.pop(key, None)
        if seq != self.seq + 1:
            self.complete = False
        self.seq = seq

    def evidence(self) -> list[list[int | bool | None]]:
        """[job id, generation, started, exit status] of each attempt not done; started is
        whether the log file exists now (None: its path was not sent). A path or status
        that does not read makes the account incomplete."""
        out: list[list[int | bool | None]] = []
        for (job_id, gen), (log, code) in self.attempts.items():
            started, status = None, None
            try:
                path = None if log is None else json.loads(log.decode())
                if path is not None:
                    started = os.path.exists(path) if isinstance(path, str) else None
                    self.complete = self.complete and started is not None
                if code is not None:
                    status = int(code)
            except (ValueError, TypeError):  # not a line of ours
                self.complete = False
            out.append([job_id, gen, started, status])
        return out


@dataclass(frozen=True)
class Seen:
    """What a dead daemon's witness wrote down (see :func:`witnessed`)."""

    #: Job ids whose commands were alive just after the death.
    alive: set[int]
    #: Whether every line of the feed arrived (an old witness file: False).
    complete: bool = False
    #: (job id, generation) -> (started, exit status) of the attempts the feed named.
    attempts: dict[tuple[int, int], tuple[bool | None, int | None]] = field(default_factory=dict)

    def started(self, job_id: int, generation: int) -> bool | None:
        """False when the attempt's command cannot have started; None: not known."""
        if (job_id, generation) in self.attempts:
            return self.attempts[job_id, generation][0]
        return False if self.complete else None

    def exit_code(self, job_id: int, generation: int) -> int | None:
        return self.attempts.get((job_id, generation), (None, None))[1]


def witnessed(db: Path, owner: str, wait: float = 2.0) -> Seen | None:
    """What the witness of daemon ``owner`` saw at its death; None: no witness.

    Waits up to ``wait`` seconds for a witness of ``owner`` that is still writing.
    """
    path = _file(witness_dir(db), owner)
    deadline = time.monotonic() + wait
    while not path.exists() and time.monotonic() < deadline and _witness_running(owner):
        time.sleep(0.01)
    try:
        data = json.loads(path.read_text())
        attempts = {(int(a[0]), int(a[1])): (a[2], a[3]) for a in data.get("attempts", [])}
        return Seen({int(i) for i in data.get("alive", [])}, data.get("complete") is True, attempts)
    except (OSError, ValueError, TypeError, IndexError):
        return None


def forget(db: Path) -> None:
    """Drop every witness file once recovery has put their evidence in the store."""
    folder = witness_dir(db)
    if folder.is_dir():
        for path in [*folder.glob("*.json"), *folder.glob("*.gap")]:
            path.unlink(missing_ok=True)


def _witness_running(owner: str) -> bool:
    want = b"jobctl.engine.witness"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if want in args and owner.encode() in args:
                return True
    return False


def alive_jobs(owner: str) -> set[int]:
    """Job ids of live processes whose environment names ``owner`` as lease owner."""
    marker = f"JOBCTL_LEASE_OWNER={owner}".encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, a zombie (no environment) or not ours to read
        if marker in env:
            for item in env:
                if item.startswith(b"JOBCTL_JOB_ID="):
                    found.add(int(item.split(b"=", 1)[1]))
    return found


def follow(fd: int, feed: Feed, every: float = DRAIN) -> bool:
    """Read the daemon's lines into ``feed`` until end-of-file (the daemon is gone: True)
    or its goodbye (a clean stop: False).

    While lines come, the witness is not woken by them (issue 17: a wake-up per loop
    turn's lines, each a switch to this process and its reads, cost the daemon's writes
    and ~20-30 µs of this process's CPU per job): it waits in ``poll`` for no event,
    which only the pipe's hang-up ends (``POLLHUP`` is always reported; a write's
    wake-up is keyed ``POLLIN``, which such a waiter does not take), for at most
    ``every`` seconds, then empties the pipe. Once a read finds nothing it waits for the
    next line (``POLLIN``): an idle daemon's witness sleeps. The death is seen at once
    either way: the last writer's close wakes every waiter."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    os.set_blocking(fd, False)
    rest = b""
    quiet = True  # nothing came at the last read: wait for a line
    while True:
        poller.modify(fd, select.POLLIN if quiet else 0)
        poller.poll(None if quiet else int(every * 1000))
        quiet = True
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # emptied; the daemon is alive
                break
            if not chunk:
                if rest:
                    feed.complete = False  # a line cut short
                return True
            quiet = False
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if line == BYE:
                    return False
                if line:
                    feed.take(line)


def main(folder: str, owner: str) -> int:
    feed = Feed()
    if not follow(sys.stdin.fileno(), feed):
        return 0
    time.sleep(SETTLE)
    alive = sorted(alive_jobs(owner))
    attempts = feed.evidence()  # first: a line that does not read makes it incomplete
    evidence = {
        "owner": owner,
        "alive": alive,
        "at": time.time(),
        "complete": feed.complete and not _file(Path(folder), owner, ".gap").exists(),
        "attempts": attempts,
    }
    path = _file(Path(folder), owner)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(evidence))
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

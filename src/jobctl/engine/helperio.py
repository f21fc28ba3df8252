"""The spawn helper's own surroundings: its environment, where its own output goes, and
how soon a dead one's successor starts (:class:`Backoff`).

Why the helper does not inherit the daemon's stdout and stderr: it writes nothing while it
works, and what it may write (the traceback or the one line it ends with, e.g.
``Starter.step_out`` in engine/spawnstart.py) is the only evidence of why it died.
Inherited, that evidence went wherever the daemon's stderr went: into a pipe whose reader
had gone (an ssh session closed, ``| tee`` killed, journald restarted) it was lost, so a
helper that kept dying left no trace of why; into a live one it came as lines that are not
the daemon's logfmt. So the helper's stdin and stdout are ``/dev/null`` and its stderr is
a pipe the daemon reads (:class:`LastWords`) on its event loop as it fills (the helper
never waits on it). The daemon keeps the last :data:`KEEP` bytes and says them in its
``event=spawn_helper_died`` line (``said=``), in its own log, wherever that goes now
(jobctl/daemonlog.py). Commands never hold the pipe: each gets its attempt's log as its
stdout and stderr (engine/spawnstart.py), the pipe's end is close-on-exec in the daemon.
"""

from __future__ import annotations

import asyncio
import os
import sys

__all__ = ["KEEP", "LINES", "RESTART_MAX", "RESTART_PAUSE", "Backoff", "LastWords", "helper_env"]

#: Bytes of what the helper wrote last that are kept (older ones are dropped).
KEEP = 4096
#: Lines of it the daemon's log line shows (a traceback's last: where, and the error).
LINES = 3
#: A helper that died within this many seconds of its start is restarted this much later.
RESTART_PAUSE = 1.0
#: The longest wait before a restart, reached by doubling :data:`RESTART_PAUSE`.
RESTART_MAX = 60.0


def helper_env() -> dict[str, str]:
    """The helper's own environment: enough to import jobctl, nothing else."""
    path = os.pathsep.join(p for p in sys.path if p)
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": path}


class LastWords:
    """The read end of a helper's stderr: drained on the loop, its last bytes kept."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._tail = b""

    def open(self, loop: asyncio.AbstractEventLoop) -> int:
        """A pipe for a new helper's stderr (the last one's is closed); returns its write
        end, which the caller closes once the helper holds it."""
        self.close()
        read, write = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(read, False)
        self._loop, self._fd, self._tail = loop, read, b""
        loop.add_reader(read, self._on_readable)
        return write

    def _on_readable(self) -> None:
        if not self._drain():  # every writer is gone: nothing more will come
            self.close()

    def _drain(self) -> bool:
        """Read what waits in the pipe; False at its end."""
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self._tail = (self._tail + data)[-KEEP:]

    def take(self) -> str:
        """What the helper (dead by now: its writes are all in the pipe) said last, as one
        line of text: its last :data:`LINES` lines joined by `` | ``, or ``""``."""
        if self._fd >= 0:
            self._drain()
            self.close()
        text, self._tail = self._tail.decode(errors="replace"), b""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-LINES:])

    def close(self) -> None:
        """Stop reading and close the read end (what was read is kept for :meth:`take`)."""
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1


class Backoff:
    """How soon a dead helper's successor starts. At once, unless the helper died within
    ``first`` seconds of its start: then ``first`` later, and for each next helper in a row
    that does so too, twice as late as before, up to ``most``. A helper that cannot start at
    all (a limit it cannot set, its code gone) was restarted every ~1 s for as long as the
    daemon ran, each time a Python start and a log line; now it is tried about once a
    minute after six tries, and its ``said=`` tells why (:class:`LastWords`)."""

    def __init__(self, first: float = RESTART_PAUSE, most: float = RESTART_MAX) -> None:
        self.first, self.most = first, most
        #: Helpers in a row that died within ``first`` seconds of their start.
        self.streak = 0

    def after(self, lived: float) -> float:
        """Seconds to wait before the next helper, after one that lived ``lived`` seconds."""
        self.streak = self.streak + 1 if lived < self.first else 0
        return 0.0 if not self.streak else min(self.first * 2 ** (self.streak - 1), self.most)

"""Where the daemon's log lines go once its stderr has gone away.

The daemon logs to stderr: the journal under systemd, else a terminal, a pipe or a file.
That stream can vanish while the daemon runs on (an ssh session closed, a ``| tee``
killed, journald restarted): a write then fails with ``EPIPE`` or ``EIO`` (Python
ignores SIGPIPE, so nothing of jobctl dies of it) and fails again every time after, so
every later line was dropped, silently. Now the log handler (logfmt.
BackgroundStreamHandler) says so once, in a line of its own (``event=log_stream_gone``),
and writes that line and every later one to the daemon's own log file: ``daemon.log`` in
its state directory (beside the database, :func:`jobctl.daemon.wiring.daemon_log`),
created 0600, at most :data:`CAP` bytes, then moved to ``daemon.log.1`` (one kept) and
begun afresh, so a daemon left running for months cannot fill its disk with it. Jobs are
not affected: commands write to their own logs, the spawn helper to a pipe the daemon reads
(engine/helperio.py). A failure that may pass (a full disk, a full non-blocking pipe) is
not "gone": those lines are dropped as before, and stderr is tried again for the next.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["CAP", "GONE", "LogFile", "gone", "why"]

#: Bytes the file may hold before it is moved to ``<name>.1``.
CAP = 16 << 20
#: Errors of a write to stderr that mean it is gone for good.
GONE = frozenset({errno.EPIPE, errno.EIO, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


def gone(exc: BaseException) -> bool:
    """Whether a failed write means the stream is gone for good (a closed file object's
    ``ValueError`` too)."""
    return isinstance(exc, ValueError) or (isinstance(exc, OSError) and exc.errno in GONE)


def why(exc: BaseException) -> str:
    """The error's short name for the log line (``EPIPE``), ``closed`` for a closed file."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "closed"


class LogFile:
    """The daemon's own log file, written as a text stream (what the handler needs of one):
    appended to, never through a symlink, moved aside at :attr:`cap` bytes.

    ``stderr``: the file takes the place of the dead stderr (descriptor 2), so what the
    process writes there outside the log handler (a fatal traceback, the stacks
    ``PYTHONFAULTHANDLER`` prints when systemd's watchdog aborts a hung daemon) lands in
    it too instead of in a pipe nobody reads."""

    def __init__(self, path: Path, cap: int = CAP, stderr: bool = False) -> None:
        self.path = path
        self.cap = cap
        self.stderr = stderr
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        fd = os.open(self.path, _FLAGS, 0o600)
        if self.stderr:
            os.dup2(fd, 2)
        return fd

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "backslashreplace")
        if self._size and self._size + len(data) > self.cap:
            self._move_aside()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(data)
        return len(text)

    def _move_aside(self) -> None:
        """Keep the full file as ``<name>.1`` (replacing the one before) and begin anew."""
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        fd = self._open()
        os.close(self._fd)
        self._fd, self._size = fd, 0

    def flush(self) -> None:
        """Nothing is buffered here."""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

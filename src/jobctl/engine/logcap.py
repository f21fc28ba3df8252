"""The log cap keeps the head *and* the latest output of an attempt.

The command writes straight to its log file (``O_APPEND``; no pipe, no copy by the
daemon), and the ``log_bytes`` quota is its ``RLIMIT_FSIZE``: the file can never grow
past the cap, whatever the command does. To keep the latest output as well as the
head, the executor looks at each live capped log four times a second (:func:`trim`: one
``stat``); when it has filled three quarters of the cap, the middle is removed in place
with ``fallocate(FALLOC_FL_COLLAPSE_RANGE)``, which shifts the later bytes down under the
inode's lock, so appends racing it land after them and nothing is lost or reordered.
The first quarter of the cap stays (the head, ending with a note that says how many bytes
were cut there), the last quarter stays, and the command has half the cap of room again.

Why not a pipe read by the daemon or the spawn helper: every byte of every job would
cross a process boundary and the daemon's loop; with the file written directly, a
command that prints nothing costs nothing, and a verbose one costs the kernel one
extent shift per cut. Limits: a filesystem without ``COLLAPSE_RANGE`` (tmpfs, btrfs,
NFS) keeps the head only, as before; a command that writes more than half the cap
within a quarter second between checks meets the cap (its writes fail with ``EFBIG``) until
the next check makes room; the bytes of the note replace the end of the head.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobctl.engine.process import Running

_log = logging.getLogger("jobctl.executor")

#: ``FALLOC_FL_COLLAPSE_RANGE`` (linux/falloc.h).
COLLAPSE_RANGE = 0x08
#: Seconds between two looks at the live capped logs (an fstat each: cheap).
TRIM_EVERY = 0.25
#: The fixed-width note written at the end of the head at the first cut, and rewritten
#: (same length) at each later one. Begins with ``CUT_MARK`` (engine/process.py).
NOTE = (
    "\n[jobctl: output cut at {cap} bytes by the log_bytes quota: {cut:>20} bytes "
    "dropped here; the latest output follows]\n"
)

#: libc, for ``fallocate`` (loaded once, when a log is first cut).
_LIBC: list[ctypes.CDLL] = []


def _fallocate() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def note(cap: int, cut: int) -> bytes:
    return NOTE.format(cap=cap, cut=cut).encode()


def layout(cap: int, block: int) -> tuple[int, int] | None:
    """(head, threshold) in bytes for a cap and a filesystem block size: the head is the
    first quarter of the cap, block-aligned; a cut happens past three quarters. None
    when the cap is too small to keep both (the head only, as with no support)."""
    head = (cap // 4) // block * block
    if head < block or head <= len(note(cap, 0)) or cap // 4 < block:
        return None
    return head, cap - cap // 4


def trim(run: Running) -> int:
    """Cut the middle of ``run``'s log if it filled three quarters of its cap; returns
    the bytes cut now (0: nothing to do, or not possible here)."""
    cap = run.log_cap
    if cap is None or run.trim_off:
        return 0
    try:  # a stat first: most logs are far from their cap, and need no descriptor
        if os.stat(run.log_path).st_size < cap - cap // 4:
            return 0
        fd = os.open(run.log_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        return _trim_fd(run, fd, cap)
    finally:
        os.close(fd)


def _trim_fd(run: Running, fd: int, cap: int) -> int:
    st = os.fstat(fd)
    shape = layout(cap, max(st.st_blksize, 512))
    if shape is None:
        run.trim_off = True
        return 0
    head, threshold = shape
    size, block = st.st_size, max(st.st_blksize, 512)
    if size < threshold:
        return 0
    keep = cap // 4
    length = (size - head - keep) // block * block
    if length <= 0:
        return 0
    libc = _fallocate()
    if libc.fallocate(fd, COLLAPSE_RANGE, ctypes.c_long(head), ctypes.c_long(length)) != 0:
        err = ctypes.get_errno()
        if err in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.EPERM):
            run.trim_off = True  # this filesystem cannot: the head only, as before
        _log.info("event=log_trim_unavailable path=%s error=%s", run.log_path, os.strerror(err))
        return 0
    run.cut_bytes += length
    text = note(cap, run.cut_bytes)
    os.pwrite(fd, text, head - len(text))
    return length

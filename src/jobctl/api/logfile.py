"""Serving an attempt's log: streamed in chunks off the event loop, tailed, resumed.

A log may be hundreds of megabytes (up to the ``log_bytes`` quota). It is never read
whole: the route opens the file (on a worker thread, so a failure at the open-file limit
is a 503 before any byte is sent), finds where to start (``offset``, or the start of the
last ``tail`` lines found by reading backwards in chunks), and Starlette pulls the body
from :meth:`LogSlice.chunks` one :data:`CHUNK` at a time on its thread pool. Memory per
request is one chunk, whatever the log's size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

#: Bytes read and sent at a time.
CHUNK = 64 * 1024


def tail_start(f: BinaryIO, size: int, lines: int, chunk: int = CHUNK) -> int:
    """The offset where the last ``lines`` lines of the first ``size`` bytes begin.

    A final line without a newline counts as a line; with fewer lines than asked, 0.
    Reads backwards one chunk at a time: memory is one chunk, however long a line is.
    """
    if lines <= 0 or size <= 0:
        return size
    pos = size
    # a newline that ends the data ends the last line; it does not start another one
    f.seek(size - 1)
    skip_last = f.read(1) == b"\n"
    wanted = lines + 1 if skip_last else lines
    while pos > 0:
        start = max(0, pos - chunk)
        f.seek(start)
        block = f.read(pos - start)
        end = len(block)
        while end > 0:
            nl = block.rfind(b"\n", 0, end)
            if nl < 0:
                break
            wanted -= 1
            if wanted == 0:
                return start + nl + 1
            end = nl
        pos = start
    return 0


@dataclass
class LogSlice:
    """An open log file and the byte range of it to send."""

    file: BinaryIO
    start: int
    size: int

    def chunks(self) -> Iterator[bytes]:
        """The bytes from ``start`` up to the size seen at open, a chunk at a time; the
        file is closed at the end or when the client goes away (generator close)."""
        try:
            self.file.seek(self.start)
            left = self.size - self.start
            while left > 0:
                data = self.file.read(min(CHUNK, left))
                if not data:
                    return
                left -= len(data)
                yield data
        finally:
            self.file.close()


def open_slice(path: str, offset: int, tail: int | None) -> LogSlice | None:
    """Open ``path`` and place the range to send; None if the file is gone.

    Runs on a worker thread. The size is fixed at open: a running attempt's log keeps
    growing, and the client resumes from ``start + bytes received`` (``?offset=``).
    OSError other than a missing file (EMFILE: 503) propagates to the route.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by LogSlice.chunks
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(f.fileno()).st_size
        start = min(offset, size)
        if tail is not None:
            start = max(start, tail_start(f, size, tail))
    except BaseException:
        f.close()
        raise
    return LogSlice(f, start, size)


def slice_text(data: bytes, offset: int, tail: int | None) -> tuple[int, bytes]:
    """The same range over bytes in memory (an attempt whose log file is gone: its
    stored output tail). Returns (start offset, bytes)."""
    import io

    size = len(data)
    start = min(offset, size)
    if tail is not None:
        start = max(start, tail_start(io.BytesIO(data), size, tail))
    return start, data[start:]

"""The daemon's log handler: formats on the caller, writes in order on its own thread."""

from __future__ import annotations

import errno
import io
import logging
import os
import stat
import threading
from pathlib import Path

from jobctl import daemonlog
from jobctl.logfmt import LOGFMT, BackgroundStreamHandler, LogfmtFormatter


class CountingStream(io.StringIO):
    """Counts writes and signals each one (``wrote``). Built ``blocked``, writes wait until
    ``release`` is set, so lines pile up behind the first."""

    def __init__(self, blocked: bool = False) -> None:
        super().__init__()
        self.writes = 0
        self.wrote = threading.Event()
        self.release = threading.Event()
        if not blocked:
            self.release.set()

    def write(self, s: str) -> int:
        self.writes += 1
        self.wrote.set()
        self.release.wait(5)
        return super().write(s)


def _logger(handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(f"jobctl.test.{id(handler)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def test_lines_come_out_in_order_and_flush_waits_for_them() -> None:
    stream = CountingStream(blocked=True)
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = _logger(handler)
    log.info("event=first")
    for n in range(200):
        log.info("event=next n=%d", n)
    stream.release.set()
    handler.flush()
    lines = stream.getvalue().splitlines()
    assert lines == ["event=first"] + [f"event=next n={n}" for n in range(200)]
    assert stream.writes < 201  # the lines queued behind the blocked write went out together
    handler.close()


def test_lines_logged_one_by_one_after_a_write_gather_into_one_write() -> None:
    stream = CountingStream()
    handler = BackgroundStreamHandler(stream, gather=0.3)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = _logger(handler)
    log.info("event=first")
    assert stream.wrote.wait(5)  # written at once: an idle handler does not wait
    for n in range(100):  # the thread is gathering now: no wake-up per line
        log.info("event=next n=%d", n)
    handler.flush()
    assert stream.getvalue().splitlines() == ["event=first"] + [
        f"event=next n={n}" for n in range(100)
    ]
    assert stream.writes == 2
    handler.close()


def test_close_writes_what_is_left_and_later_flushes_do_not_hang() -> None:
    stream = io.StringIO()
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = _logger(handler)
    for n in range(50):
        log.info("line %d", n)
    handler.close()
    assert stream.getvalue().splitlines() == [f"line {n}" for n in range(50)]
    handler.flush()  # after close: returns at once


def test_logfmt_formatter_matches_the_plain_format() -> None:
    record = logging.LogRecord("jobctl.x", logging.INFO, "", 0, "event=a job=%d", (7,), None)
    plain = logging.Formatter(LOGFMT)
    for created in (1_700_000_000.25, 1_700_000_000.999, 1_700_000_001.0):
        record.created = created
        record.msecs = (created - int(created)) * 1000
        assert LogfmtFormatter().format(record) == plain.format(record)


class FailingStream(io.StringIO):
    """Fails each write with ``error`` while it is set (a pipe whose reader went away:
    EPIPE; a full disk: ENOSPC)."""

    def __init__(self, error: int | None) -> None:
        super().__init__()
        self.error = error

    def write(self, s: str) -> int:
        if self.error is not None:
            raise OSError(self.error, os.strerror(self.error))
        return super().write(s)


def test_a_stream_gone_for_good_is_said_once_and_the_lines_go_to_the_fallback(
    tmp_path: Path,
) -> None:
    handler = BackgroundStreamHandler(FailingStream(errno.EPIPE))
    handler.setFormatter(LogfmtFormatter())
    handler.fallback = tmp_path / "daemon.log"
    log = _logger(handler)
    log.info("event=first")
    handler.flush()
    log.info("event=second")
    handler.close()
    lines = (tmp_path / "daemon.log").read_text().splitlines()
    assert len(lines) == 3 and stat.S_IMODE(os.stat(tmp_path / "daemon.log").st_mode) == 0o600
    assert lines[0].endswith(
        f"level=WARNING logger=jobctl.daemon event=log_stream_gone stream=stderr error=EPIPE "
        f"log={tmp_path / 'daemon.log'}"
    )
    assert lines[1].endswith("event=first") and lines[2].endswith("event=second")


def test_a_failure_that_may_pass_drops_its_lines_and_keeps_the_stream() -> None:
    stream = FailingStream(errno.ENOSPC)
    handler = BackgroundStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.fallback = Path("/nonexistent/never-opened.log")
    log = _logger(handler)
    log.info("event=dropped")
    handler.flush()
    stream.error = None
    log.info("event=written")
    handler.close()
    assert stream.getvalue() == "event=written\n"
    assert handler.fallback is not None  # not used up: the stream was not gone


def test_the_daemons_own_log_file_is_moved_aside_at_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    sink = daemonlog.LogFile(path, cap=100)
    for n in range(9):
        sink.write(f"line {n:02d} " + "x" * 20 + "\n")  # 29 bytes each: three fit
    sink.close()
    assert path.read_text().splitlines() == [f"line {n:02d} " + "x" * 20 for n in (6, 7, 8)]
    old = path.with_name("daemon.log.1").read_text().splitlines()
    assert old == [f"line {n:02d} " + "x" * 20 for n in (3, 4, 5)]  # one kept: 0-2 are gone

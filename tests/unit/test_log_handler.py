"""The daemon's log handler: formats on the caller, writes in order on its own thread."""

from __future__ import annotations

import io
import logging
import threading

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

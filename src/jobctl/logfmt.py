"""The daemon's two log line formats: logfmt (``key=value``) and JSON, one object a line.

The daemon logs events as logfmt messages (``event=started job=7 attempt=1``), which the
journal and grep read well. Log shippers (Loki, Elasticsearch, Vector) want JSON: rather
than change every log call, :class:`JsonFormatter` parses the logfmt message back into
fields, so both formats carry the same keys and a new log call needs no JSON-specific code.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from jobctl import daemonlog

#: The logfmt line of :func:`jobctl.daemon.setup_logging`, kept identical to it.
LOGFMT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"

_KEY = re.compile(r"\s*([A-Za-z_][\w.]*)=")
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
_NEXT_KEY = re.compile(r"\s+[A-Za-z_][\w.]*=")


def parse_logfmt(message: str) -> dict[str, Any] | None:
    """The ``key=value`` pairs of ``message``, or None if it is not logfmt.

    Values may be quoted (``reason='lease lost'``, Python reprs from ``%r`` included); an
    unquoted value runs to the next ``key=``, so ``pids=[1, 2]`` stays one value. Integers
    become numbers, so ``job`` can be compared as one in a JSON query.
    """
    out: dict[str, Any] = {}
    pos = 0
    while pos < len(message):
        key = _KEY.match(message, pos)
        if key is None:
            return None
        pos = key.end()
        quoted = _QUOTED.match(message, pos)
        if quoted and (quoted.end() == len(message) or message[quoted.end()].isspace()):
            value: Any = _unquote(quoted.group())
            pos = quoted.end()
        else:
            nxt = _NEXT_KEY.search(message, pos)
            end = nxt.start() if nxt else len(message)
            value = message[pos:end]
            pos = end
            if re.fullmatch(r"-?\d{1,18}", value):
                value = int(value)
        out[key.group(1)] = value
    return out or None


def _unquote(text: str) -> str:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text[1:-1]
    return value if isinstance(value, str) else text[1:-1]


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO-8601), ``level``, ``logger``, then the
    message's own fields, or ``msg`` when the message is not logfmt."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        fields = parse_logfmt(message)
        if fields is None:
            line["msg"] = message
        else:
            for key, value in fields.items():
                line[key if key not in line else f"msg_{key}"] = value  # never hide ts/level
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def make_formatter(fmt: str) -> logging.Formatter:
    """The formatter for ``log_format`` (``logfmt`` or ``json``)."""
    if fmt == "json":
        return JsonFormatter()
    if fmt == "logfmt":
        return LogfmtFormatter()
    raise ValueError(f"unknown log format {fmt!r}")


_BARE = re.compile(r"[^\s\x00-\x1f\x7f\"'=\\]+")


def logval(value: object) -> str:
    """``value`` as one logfmt value: bare when it can be, else double-quoted and escaped.

    Errors, keys, queue names and paths may hold spaces, quotes or ``=``; unquoted they
    would split into bogus fields. Double quotes with JSON escapes are what logfmt readers
    (Loki, go-logfmt, :func:`jobctl.logfmt.parse_logfmt`) all agree on, unlike ``%r``'s
    single quotes.
    """
    text = str(value)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    """:data:`LOGFMT`, with the date part of each second formatted once, not per line."""

    def __init__(self) -> None:
        super().__init__(LOGFMT)
        #: (second, its date part): one tuple, so that threads logging at once never
        #: pair one second with another's text.
        self._stamp: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return f"{self._date(record.created)},{int(record.msecs):03d}"

    def _date(self, created: float) -> str:
        second = int(created)
        stamp = self._stamp
        if stamp[0] != second:
            stamp = (second, time.strftime("%Y-%m-%d %H:%M:%S", self.converter(created)))
            self._stamp = stamp
        return stamp[1]

    def head(self, second: int, msecs: int, levelname: str, name: str) -> str:
        """What :meth:`format` puts before the message of a record of these made in
        ``second``, ``msecs`` (as :class:`logging.LogRecord` computes its ``created`` and
        ``msecs``): a line without the record (see :func:`direct`)."""
        return f"ts={self._date(second)},{msecs:03d} level={levelname} logger={name} "


#: Stands for "the queue is empty" in BackgroundStreamHandler._drain (setting it is harmless).
_IDLE = threading.Event()


class BackgroundStreamHandler(logging.Handler):
    """Format on the caller, write on a thread of its own.

    Why: the event loop logs an event line per job. Writing each line to stderr is a
    system call that releases the GIL, and getting it back from the store's busy writer
    thread can take a whole switch interval, so per-line writes on the loop halved
    enqueue throughput. Lines queued here are written in order, many per ``write``;
    :meth:`close` (at exit, via logging's shutdown) writes what is left. Once the stream
    is gone for good (its reader went away), they go to :attr:`fallback`, said there once
    (jobctl/daemonlog.py).
    """

    def __init__(self, stream: IO[str], gather: float = 0.02) -> None:
        super().__init__()
        self.stream: IO[str] | daemonlog.LogFile = stream
        self.gather = gather  # seconds a written batch waits for more lines
        #: The file the lines go to once ``stream`` is gone for good (jobctl/daemonlog.py);
        #: None: they are dropped (and once it is in use: there is no second move).
        self.fallback: Path | None = None
        # a line, an Event to set once everything before it is written, or None: stop
        self._lines: queue.SimpleQueue[str | threading.Event | None] = queue.SimpleQueue()
        #: :func:`direct`'s writers, by logger name.
        self.writers: dict[str, _Writer] = {}
        self._thread = threading.Thread(target=self._drain, name="jobctl-log", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.put(self.format(record))
        except Exception:  # logging must never take the daemon down
            self.handleError(record)

    def put_line(self, line: str) -> None:
        """Queue a formatted line, after every line emitted before it (:class:`Direct`)."""
        self._lines.put(line)

    def _drain(self) -> None:
        while True:
            item = self._lines.get()
            batch: list[str] = []
            while isinstance(item, str):  # take every line queued by now: one write
                batch.append(item)
                try:
                    item = self._lines.get_nowait()
                except queue.Empty:
                    item = _IDLE
            if batch:
                self._write(batch)
            if item is None:
                return
            item.set()
            if batch:
                # Let the next lines gather instead of waking per line: each wake-up made
                # this thread take the GIL from the busy event loop (measured: per-line
                # wake-ups cost single-job enqueue about a tenth of its rate).
                time.sleep(self.gather)

    def _write(self, batch: list[str]) -> None:
        try:
            self.stream.write("\n".join(batch) + "\n")
            self.stream.flush()
        except (OSError, ValueError) as exc:  # a full disk; stderr closed or gone
            if self._move_on(exc):
                self._write(batch)

    def _move_on(self, exc: OSError | ValueError) -> bool:
        """When ``stream`` is gone for good and there is a :attr:`fallback`: say so there,
        once, and write there from now on (True: write the batch again). Else False: the
        batch is dropped (a full disk may pass; with no fallback nothing is better)."""
        if self.fallback is None or not daemonlog.gone(exc):
            return False
        path, self.fallback = self.fallback, None
        try:
            sink = daemonlog.LogFile(path, stderr=_is_stderr(self.stream))
        except OSError:
            return False
        self.stream = sink
        notice = logging.LogRecord(
            "jobctl.daemon", logging.WARNING, __file__, 0,
            "event=log_stream_gone stream=stderr error=%s log=%s",
            (daemonlog.why(exc), logval(path)), None,
        )  # fmt: skip
        with contextlib.suppress(OSError):
            sink.write(self.format(notice) + "\n")
        return True

    def flush(self) -> None:
        """Wait until every line queued so far is written (bounded: 5 s)."""
        if self._thread.is_alive():
            done = threading.Event()
            self._lines.put(done)
            done.wait(5)

    def close(self) -> None:
        if self._thread.is_alive():
            self._lines.put(None)
            self._thread.join(5)
        if isinstance(self.stream, daemonlog.LogFile) and not self._thread.is_alive():
            self.stream.close()
        super().close()


def _is_stderr(stream: IO[str] | daemonlog.LogFile) -> bool:
    """Whether ``stream`` writes to descriptor 2 (the process's stderr)."""
    try:
        return isinstance(stream, io.TextIOBase) and stream.fileno() == 2
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return False


def direct(logger: logging.Logger) -> Callable[[str], None] | None:
    """A writer of ``logger``'s INFO lines straight to its one handler, without a
    LogRecord; None: log as usual.

    The daemon writes an ``event=enqueued`` line per job: through ``Logger.log`` (the
    record, its level, handler and filter checks, the formatter's attribute dict) a line
    cost ~15 µs of the event loop, several percent of a single-job enqueue's CPU. When the
    logger's lines can only go to the daemon's own handler (:func:`jobctl.daemon.runtime.
    setup_logging`: one :class:`BackgroundStreamHandler` with a :class:`LogfmtFormatter`,
    no filters, no custom logger or record class, nothing disabled), the writer queues the
    identical line (:meth:`LogfmtFormatter.head`, the same clock) on that handler. Any
    other set-up (JSON lines, tests' capture handlers…) gets None. Checked per call (a few
    attribute reads): the configuration may change.
    """
    if (
        type(logger) is not logging.Logger
        or logger.filters
        or logger.disabled
        or not logger.isEnabledFor(logging.INFO)
        or logging.getLogRecordFactory() is not logging.LogRecord
    ):
        return None
    handler = _only_handler(logger)
    if (
        type(handler) is not BackgroundStreamHandler
        or handler.filters
        or handler.level > logging.INFO
    ):
        return None
    formatter = handler.formatter
    if type(formatter) is not LogfmtFormatter:
        return None
    writer = handler.writers.get(logger.name)
    if writer is None or writer.formatter is not formatter:
        writer = handler.writers[logger.name] = _Writer(formatter, handler, logger.name)
    return writer


class _Writer:
    """:func:`direct`'s writer: the line's head (time, level, logger) made once per
    millisecond, then a line per message."""

    def __init__(self, formatter: LogfmtFormatter, handler: BackgroundStreamHandler, name: str):
        self.formatter = formatter
        self._put = handler.put_line
        self._name = name
        #: (second, milliseconds, head): one tuple, as LogfmtFormatter's date part.
        self._head: tuple[int, int, str] = (-1, -1, "")

    def __call__(self, message: str) -> None:
        created = time.time()
        second = int(created)
        msecs = int((created - second) * 1000)  # as LogRecord's msecs
        head = self._head
        if head[1] != msecs or head[0] != second:
            head = (second, msecs, self.formatter.head(second, msecs, "INFO", self._name))
            self._head = head
        self._put(head[2] + message)


def info(logger: logging.Logger, line: str, args: tuple[object, ...]) -> None:
    """``logger.info(line, *args)``, the :func:`direct` way where it can go so (the same
    bytes without a LogRecord, ~3 µs instead of ~12: the executor's two lines per
    attempt, issue 17). A caller writing many lines at once hoists :func:`direct`."""
    write = direct(logger)
    if write is not None:
        write(line % args)
    else:
        logger.info(line, *args)


def _only_handler(logger: logging.Logger) -> logging.Handler | None:
    """The one handler a record of ``logger`` reaches (propagation included), or None."""
    found: list[logging.Handler] = []
    at: logging.Logger | None = logger
    while at is not None:
        found += at.handlers
        if not at.propagate:
            break
        at = at.parent
    return found[0] if len(found) == 1 else None

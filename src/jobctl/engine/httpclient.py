"""A lean HTTP/1.1 client for webhook requests (issue 16), on asyncio's own transports.

Why not httpx: under a burst, httpx → httpcore → anyio took 60% of the event loop per
request (client layers, cancel scopes and ``fail_after`` per read and write, h11's event
machine): ~800 deliveries/s at best. A webhook needs far less of HTTP, and this module does
only that, so a delivery costs a few microseconds of parsing:

* one request at a time on a connection (:class:`Connection`, an :class:`asyncio.Protocol`),
  HTTP/1.1, kept alive unless the answer says ``Connection: close``, is HTTP/1.0 or its body
  is read until the close; the pool (engine/httppool.py) hands connections out per target;
* the request head is built here (:func:`request_bytes`): the caller's headers, ``Host``,
  ``Content-Length``, a ``User-Agent``; no ``Accept-Encoding``, so the answer comes as is
  (nothing to decompress for the output tail);
* the answer: status line, headers (``Retry-After`` kept), then the body by
  ``Content-Length``, chunked, or until the close; 1xx answers are skipped, a 101 is an
  error; only the first :data:`~jobctl.domain.http.TAIL_BYTES` are kept, and a longer body is
  not read to its end: the connection is closed instead (a receiver cannot make the daemon
  read megabytes);
* no redirect is followed (a 3xx is an answer like any other), no proxy, no cookies;
* timeouts: each wait for the answer's next bytes is bounded (a timer armed once per
  request that re-checks the last time bytes came); the pool bounds the connect and the TLS
  handshake; the caller's ``asyncio.timeout`` caps the whole call.

A malformed answer raises :class:`BadAnswer`, a :class:`ConnectionError` (so an ``OSError``,
like a refused connection or a certificate that does not verify): the attempt failed, the
job is retried. A read that times out raises :class:`TimeoutError`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast
from urllib.parse import quote

from jobctl.domain.http import TAIL_BYTES

USER_AGENT = "jobctl-webhook/1"
#: The longest answer head (status line and headers) read.
MAX_HEAD = 64 * 1024
#: Methods whose request always carries a Content-Length (0 for an empty body).
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_NO_BODY = (204, 304)
_HEX = b"0123456789abcdefABCDEF"


class BadAnswer(ConnectionError):
    """The receiver's answer is not HTTP/1.1 as this client reads it."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What an attempt keeps of an answer: the status, ``Retry-After`` and the body's
    first :data:`TAIL_BYTES` (decoded, NULs dropped: it is the attempt's output tail)."""

    status: int
    retry_after: str | None
    tail: str


def request_bytes(
    method: str, target: str, host: str, headers: dict[str, str], body: bytes
) -> bytes:
    """One request's bytes. ``target`` is the path and query (non-ASCII percent-encoded
    here), ``host`` the ``Host`` header (the name, not the checked address); header values
    must be ASCII (a ValueError otherwise: the request cannot be sent as it is)."""
    if not target.isascii():
        target = quote(target, safe="".join(chr(c) for c in range(33, 127)))
    lines = [f"{method} {target} HTTP/1.1", f"host: {host}"]
    if not any(k.lower() == "user-agent" for k in headers):
        lines.append(f"user-agent: {USER_AGENT}")
    lines.extend(f"{k}: {v}" for k, v in headers.items())
    if body or method in _WITH_BODY:
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, one request at a time: :meth:`exchange`."""

    def __init__(self, read_timeout: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._read_timeout = read_timeout
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0  # when bytes last came (the read timeout counts from it)
        self.reusable = True  # false once an answer or the peer says so, or it broke
        self.idle_since = self._loop.time()
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._retry_after: str | None = None
        self._left = -1  # body bytes still to read; -1: until the close; -2: chunked
        self._chunk = 0  # chunked: data left in this chunk; -1: its CRLF; -2: trailers
        self._tail = bytearray()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports (the daemon's loop) are not asyncio.Transport subclasses
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # bytes nobody asked for: not reusable
            self.close()
            return
        self._last = self._loop.time()
        self._buf += data
        try:
            done = self._parse()
        except BadAnswer as exc:
            self._fail(exc)
            return
        if done:
            self._complete()

    def eof_received(self) -> bool | None:
        self.reusable = False
        return None  # the transport closes itself; connection_lost ends a pending read

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._status and self._left == -1:  # a body read until the close: complete
            self._complete()
        elif exc is not None:
            self._fail(exc)
        else:
            self._fail(BadAnswer("the receiver closed the connection before its answer ended"))

    # one exchange

    async def exchange(self, data: bytes) -> Answer:
        """Send ``data`` (a whole request) and read the answer; on an error, a timeout or
        a cancellation the connection is closed (its state is unknown)."""
        assert self.transport is not None and self._waiter is None
        self._reset()
        waiter: asyncio.Future[Answer] = self._loop.create_future()
        self._waiter = waiter
        self._last = self._loop.time()
        self._timer = self._loop.call_at(self._last + self._read_timeout, self._check_read)
        ok = False
        try:
            self.transport.write(data)
            answer = await waiter
            ok = True
            return answer
        finally:
            self._timer.cancel()
            self._waiter = None
            self.idle_since = self._loop.time()
            if not ok or self._buf:  # broken, or bytes past the answer: not reusable
                self.close()

    def _check_read(self) -> None:
        if self._waiter is None or self._waiter.done():  # answered meanwhile
            return
        due = self._last + self._read_timeout
        if self._loop.time() < due:  # bytes came meanwhile: wait from the last of them
            self._timer = self._loop.call_at(due, self._check_read)
            return
        self._fail(TimeoutError(f"no answer within {self._read_timeout:g}s"))

    def _fail(self, exc: BaseException) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def _complete(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        text = bytes(self._tail[:TAIL_BYTES]).decode(errors="replace").replace("\0", "")
        waiter.set_result(Answer(self._status, self._retry_after, text))

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # parsing: True once the answer is complete (or its tail is, and the rest is dropped)

    def _parse(self) -> bool:
        while not self._status:
            if not self._head():
                return False
        if self._left == -2:
            return self._chunked()
        return self._body()

    def _head(self) -> bool:
        """Read one answer head; False: not all here yet. A 1xx head is read and skipped."""
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD:
                raise BadAnswer(f"the answer's head is longer than {MAX_HEAD} bytes")
            return False
        head = bytes(self._buf[:end]).decode("latin-1")
        del self._buf[: end + 4]
        status_line, *lines = head.split("\r\n")
        version, status = _status_line(status_line)
        if status == 101 or status < 100:
            raise BadAnswer(f"unexpected HTTP {status}")
        if status < 200:
            return True  # 100 Continue and the like: the real answer follows
        self._status = status
        self._headers(lines, status)
        if version != "HTTP/1.1":
            self.reusable = False
        return True

    def _headers(self, lines: list[str], status: int) -> None:
        length: str | None = None
        chunked = False
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise BadAnswer(f"malformed header line {line[:80]!r}")
            name = name.lower()
            value = value.strip()
            if name == "content-length":
                if length is not None and length != value:
                    raise BadAnswer("two different Content-Length headers")
                length = value
            elif name == "transfer-encoding":
                chunked = value.lower().rsplit(",", 1)[-1].strip() == "chunked"
                if not chunked:
                    raise BadAnswer(f"unsupported Transfer-Encoding {value[:40]!r}")
            elif name == "connection" and "close" in value.lower():
                self.reusable = False
            elif name == "retry-after":
                self._retry_after = value
        self._framing(status, length, chunked)

    def _framing(self, status: int, length: str | None, chunked: bool) -> None:
        """How the body ends: none, chunked, a Content-Length, or the connection's close."""
        if status in _NO_BODY:
            self._left = 0
        elif chunked:
            self._left = -2
        elif length is not None:
            if not (length.isascii() and length.isdigit()) or len(length) > 18:
                raise BadAnswer(f"invalid Content-Length {length[:40]!r}")
            self._left = int(length)
        else:  # read until the close
            self.reusable = False

    def _keep(self, data: bytes | bytearray) -> None:
        room = TAIL_BYTES - len(self._tail)
        if room > 0:
            self._tail += data[:room]

    def _body(self) -> bool:
        """Content-Length or until the close."""
        buf = self._buf
        if self._left < 0:  # until the close
            self._keep(buf)
            buf.clear()
            return self._tail_full()
        take = min(self._left, len(buf))
        if take:
            self._keep(buf[:take])
            del buf[:take]
            self._left -= take
        return self._left == 0 or self._tail_full()

    def _tail_full(self) -> bool:
        """The tail is kept and more is coming: stop here and drop the connection."""
        if len(self._tail) < TAIL_BYTES:
            return False
        self.reusable = False
        self._buf.clear()
        return True

    def _chunked(self) -> bool:
        buf = self._buf
        while buf:
            if self._chunk > 0:
                take = min(self._chunk, len(buf))
                self._keep(buf[:take])
                del buf[:take]
                self._chunk -= take
                if self._chunk == 0:
                    self._chunk = -1
                if self._tail_full():
                    return True
                continue
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise BadAnswer("a chunk line or trailer is too long")
                return False
            line = bytes(buf[:end])
            del buf[: end + 2]
            if self._chunk == -1:  # the CRLF after a chunk's data
                if line:
                    raise BadAnswer("a chunk does not end with CRLF")
                self._chunk = 0
            elif self._chunk == -2:  # trailers, up to an empty line
                if not line:
                    return True
            else:
                self._chunk = _chunk_size(line)
                if self._chunk == 0:
                    self._chunk = -2
        return False


def _status_line(line: str) -> tuple[str, int]:
    version, _, rest = line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit() or rest[3:4] not in ("", " "):
        raise BadAnswer(f"not an HTTP/1.x status line: {line[:80]!r}")
    return version, int(code)


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip()
    if not size or len(size) > 16 or size.lstrip(_HEX):  # int() would take "0x1", "-1"
        raise BadAnswer(f"invalid chunk size {line[:40]!r}")
    return int(size, 16)


__all__ = ["USER_AGENT", "Answer", "BadAnswer", "Connection", "request_bytes"]

"""HTTP/1.1 over the daemon's Unix socket, written on the socket module alone.

The client is what every ``jobctl`` command and every producer program pays per request:
:mod:`http.client` costs ~30 ms of import (it loads the :mod:`email` parser) and parses
each response's headers through it, which was most of the shipped client's CPU per
request.  This transport writes a request in one ``sendall`` and reads only what the
client needs of the answer: status, content type and body (``Content-Length``, chunked,
or until close), on one kept-alive connection.
"""

from __future__ import annotations

import contextlib
import socket as _socket
import time
from collections.abc import Callable
from pathlib import Path

#: The daemon (uvicorn) closes a kept-alive connection after 5 s of silence; a request sent
#: on it just then would fail. A connection idle for longer than this is replaced first.
IDLE_RECONNECT = 4.0
_MAX_HEAD = 64 * 1024
#: Request heads kept encoded (by method, path and fields); past this many, forgotten.
_PREFIXES = 64
#: Statuses whose answers have no body, whatever their fields say.
_NO_BODY = frozenset((*range(100, 200), 204, 304))


class ProtocolError(ConnectionError):
    """The daemon's answer is not HTTP/1.1 this transport can read."""


class StaleConnection(ConnectionResetError):
    """A kept-alive connection was closed by the daemon before it answered."""


class UnixTransport:
    """HTTP/1.1 over a Unix socket, one kept-alive connection.

    A long-lived client (a library user's) goes quiet for minutes; it then reconnects
    rather than sending on a connection the daemon has closed. A read-only request that
    still meets a closed connection (the daemon restarted) is retried once on a new one;
    a write is not, since the daemon may have acted on it.
    """

    def __init__(
        self, path: Path, timeout: float = 30.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._path = str(path)
        self._timeout = timeout
        self._monotonic = monotonic
        self._sock: _socket.socket | None = None
        self._buf = b""
        self._prefixes: dict[tuple[object, ...], tuple[bytes, bool]] = {}
        self._last_used = monotonic()
        #: :meth:`hang_up` was called: each request is sent, then the sending side shut.
        self._hung_up = False

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        if self._sock is not None and self._monotonic() - self._last_used > IDLE_RECONNECT:
            self.close()
        try:
            return self._send(method, path, body, headers)
        except (BrokenPipeError, ConnectionResetError):  # StaleConnection included
            self.close()
            if method not in ("GET", "HEAD"):
                raise
            return self._send(method, path, body, headers)

    def hang_up(self) -> None:
        """Send no more: shut the sending side of the connection (a half-close), now
        and after each later request. The answer to a request in flight is still read;
        the daemon ends a long-poll on the half-close at once (answering what it
        granted before). Safe in a signal handler on the thread using this transport:
        it only sets a flag and shuts a socket, in either order of the request's steps."""
        self._hung_up = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(_socket.SHUT_WR)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf = b""

    def _connect(self) -> _socket.socket:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(self._timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        return sock

    def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        reused = self._sock is not None
        sock = self._sock or self._connect()
        try:
            head, sized = self._prefix(method, path, headers, body is not None)
            data = body or b""
            self._write(sock, head % (len(data), data) if sized else head)
            if self._hung_up:
                with contextlib.suppress(OSError):
                    sock.shutdown(_socket.SHUT_WR)
            status, ctype, payload, keep = self._response(method, reused)
        except BaseException:
            self.close()
            raise
        if not keep or self._hung_up:
            self.close()
        self._last_used = self._monotonic()
        return status, ctype, payload

    def _prefix(
        self, method: str, path: str, headers: dict[str, str], has_body: bool
    ) -> tuple[bytes, bool]:
        """The request's head, encoded once per kind of request (a producer sends the same
        one thousands of times): a template for the body's length and the body (True),
        or the whole request (False: no body, no ``Content-Length``)."""
        key = (method, path, has_body, *headers.items())
        got = self._prefixes.get(key)
        if got is None:
            head = [f"{method} {path} HTTP/1.1", "Host: localhost"]
            head += [f"{name}: {value}" for name, value in headers.items()]
            text = "\r\n".join(head).encode("latin-1")
            if has_body or method in ("POST", "PUT", "PATCH"):
                got = text.replace(b"%", b"%%") + b"\r\nContent-Length: %d\r\n\r\n%b", True
            else:
                got = text + b"\r\n\r\n", False
            if len(self._prefixes) >= _PREFIXES:
                self._prefixes.clear()
            self._prefixes[key] = got
        return got

    def _write(self, sock: _socket.socket, data: bytes) -> None:
        """Send ``data``. A daemon over its connection limits answers (503) and closes
        without reading the request, so the write fails (EPIPE) with that answer waiting
        to be read: the failure is raised only when there is no answer."""
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            try:
                got = self._recv()
            except OSError:
                got = False
            if not got:
                raise exc from None

    def _response(self, method: str, reused: bool) -> tuple[int, str, bytes, bool]:
        """Read one response: (status, content type, body, connection still usable)."""
        status, fields = self._head(reused)
        keep = fields.get("connection", "").lower() != "close"
        if status in _NO_BODY or method == "HEAD":
            payload = b""
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            payload = self._chunked()
        elif "content-length" in fields:
            payload = self._exactly(int(fields["content-length"]))
        else:
            payload, keep = self._until_close(), False
        return status, fields.get("content-type", ""), payload, keep

    def stream(self, path: str, sink: Callable[[bytes], None]) -> tuple[int, dict[str, str], bytes]:
        """GET ``path`` and hand a 2xx body to ``sink`` piece by piece as it arrives (a
        log of any size in bounded memory). Returns (status, header fields, body of a
        non-2xx answer). Always on a new connection, closed afterwards."""
        self.close()
        sock = self._connect()
        try:
            head = f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            self._write(sock, head.encode("latin-1"))
            status, fields = self._head(reused=False)
            if not 200 <= status < 300:
                return status, fields, self._until_close()
            if "chunked" in fields.get("transfer-encoding", "").lower():
                self._chunked(sink)
            else:
                left = int(fields.get("content-length", -1))
                while left != 0:  # -1: no length, until the daemon closes
                    if not self._buf and not self._recv():
                        break
                    piece = self._buf if left < 0 else self._buf[:left]
                    self._buf = self._buf[len(piece) :]
                    if left > 0:
                        left -= len(piece)
                    sink(piece)
            return status, fields, b""
        finally:
            self.close()

    def _head(self, reused: bool) -> tuple[int, dict[str, str]]:
        if not self._buf:  # the usual case: the whole answer in one read
            self._buf = self._sock.recv(1 << 16)  # type: ignore[union-attr]
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > _MAX_HEAD:
                raise ProtocolError("response head too long")
            if not self._recv():
                if reused and not self._buf:
                    raise StaleConnection("the daemon closed the kept-alive connection")
                raise ProtocolError("the daemon closed the connection before answering")
        head, self._buf = self._buf[:end].decode("latin-1"), self._buf[end + 4 :]
        status_line, *lines = head.split("\r\n")
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise ProtocolError(f"bad status line {status_line[:80]!r}") from None
        fields: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        return status, fields

    def _recv(self) -> bool:
        assert self._sock is not None
        chunk = self._sock.recv(1 << 16)
        self._buf += chunk
        return bool(chunk)

    def _exactly(self, length: int) -> bytes:
        if len(self._buf) < length:  # pieces joined once: += per recv was quadratic
            assert self._sock is not None  # (a 400 MB log took minutes)
            parts, have = [self._buf], len(self._buf)
            while have < length:
                chunk = self._sock.recv(max(1 << 16, min(length - have, 1 << 20)))
                if not chunk:
                    raise ProtocolError("the daemon closed the connection mid-answer")
                parts.append(chunk)
                have += len(chunk)
            self._buf = b"".join(parts)
        payload, self._buf = self._buf[:length], self._buf[length:]
        return payload

    def _line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if not self._recv():
                raise ProtocolError("the daemon closed the connection mid-answer")
        line, self._buf = self._buf[:end], self._buf[end + 2 :]
        return line

    def _chunked(self, sink: Callable[[bytes], None] | None = None) -> bytes:
        """A chunked body: joined, or handed chunk by chunk to ``sink`` (then b"")."""
        parts: list[bytes] = []
        while True:
            try:
                size = int(self._line().split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError("bad chunk size") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            piece = self._exactly(size)
            if sink is None:
                parts.append(piece)
            else:
                sink(piece)
            self._exactly(2)

    def _until_close(self) -> bytes:
        while self._recv():
            pass
        payload, self._buf = self._buf, b""
        return payload

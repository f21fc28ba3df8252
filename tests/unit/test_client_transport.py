"""The client's socket transport: stale kept-alive connections are replaced, not failed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobctl.client.client import IDLE_RECONNECT, UnixTransport

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"


class OneShotServer:
    """Answers one request per connection, then closes it without saying so.

    That is what the daemon does to a kept-alive connection that stayed idle too long.
    """

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(body) < length:
                    body += conn.recv(65536)
                conn.sendall(RESPONSE)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[OneShotServer, Path]]:
    path = tmp_path / "s.sock"
    srv = OneShotServer(path)
    yield srv, path
    srv.close()


def test_an_idle_connection_is_replaced_before_sending(
    server: tuple[OneShotServer, Path],
) -> None:
    srv, path = server
    now = [100.0]
    transport = UnixTransport(path, timeout=5, monotonic=lambda: now[0])
    assert transport.request("POST", "/v1/jobs", b"{}", {})[0] == 200
    now[0] += IDLE_RECONNECT + 0.5
    # the server closed the first connection; a write is safe because none is reused
    assert transport.request("POST", "/v1/jobs", b"{}", {})[0] == 200
    assert srv.connections == 2
    transport.close()


def test_a_read_meeting_a_closed_connection_is_retried_once(
    server: tuple[OneShotServer, Path],
) -> None:
    srv, path = server
    transport = UnixTransport(path, timeout=5, monotonic=lambda: 0.0)
    assert transport.request("GET", "/v1/status", None, {})[1] == "text/plain"
    assert transport.request("GET", "/v1/status", None, {})[0] == 200
    assert srv.connections == 2
    transport.close()


def test_a_write_meeting_a_closed_connection_is_not_resent(
    server: tuple[OneShotServer, Path],
) -> None:
    srv, path = server
    transport = UnixTransport(path, timeout=5, monotonic=lambda: 0.0)
    transport.request("POST", "/v1/jobs", b"{}", {})
    with pytest.raises(OSError):
        transport.request("POST", "/v1/jobs", b"{}", {})
    assert srv.connections == 1
    transport.close()


def serve_once(path: Path, response: bytes) -> threading.Thread:
    """Answer one request on one connection with ``response``, then close."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(response)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("response", "body"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-type: text/plain\r\n\r\n"
            b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n",
            b"hello, world",
        ),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", b"until the end"),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n", b""),
    ],
    ids=["chunked", "until-close", "no-content"],
)
def test_response_framings(tmp_path: Path, response: bytes, body: bytes) -> None:
    path = tmp_path / "s.sock"
    thread = serve_once(path, response)
    transport = UnixTransport(path, timeout=5)
    assert transport.request("GET", "/x", None, {})[2] == body
    transport.close()
    thread.join(5)


@pytest.mark.parametrize(
    "response",
    [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", b""],
    ids=["bad-status-line", "cut-short", "nothing"],
)
def test_a_broken_answer_is_an_oserror(tmp_path: Path, response: bytes) -> None:
    path = tmp_path / "s.sock"
    thread = serve_once(path, response)
    transport = UnixTransport(path, timeout=5)
    with pytest.raises(OSError):
        transport.request("POST", "/x", b"{}", {})
    transport.close()
    thread.join(5)


def test_an_answer_sent_before_the_request_was_read_is_still_read(tmp_path: Path) -> None:
    """A daemon over its connection limits answers 503 and closes without reading: the
    client's write then fails (EPIPE), but the answer is in the socket to be read."""
    from jobctl import errors
    from jobctl.client import Client

    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)
    body = b'{"error": {"code": "too_many_connections", "message": "too many connections"}}'
    answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    answered = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.sendall(answer)
        conn.close()
        answered.set()

    thread = threading.Thread(target=serve)
    thread.start()
    client = Client(path)
    try:
        client._transport._connect()  # type: ignore[attr-defined]
        answered.wait(5)
        with pytest.raises(errors.TooManyConnections, match="too many connections"):
            client.enqueue_many([{"command": ["x" * 1000], "cwd": "/"}] * 1000)
    finally:
        client.close()
        thread.join()
        listener.close()


def test_a_large_body_is_read_in_linear_time(tmp_path: Path) -> None:
    """64 MiB with a Content-Length: appending each recv to the buffer was quadratic
    (a 400 MB log did not arrive in minutes); joined once it takes well under a second."""
    size = 64 * 1024 * 1024
    head = f"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {size}\r\n\r\n"
    thread = serve_once(tmp_path / "big.sock", head.encode() + b"x" * size)
    t = UnixTransport(tmp_path / "big.sock")
    t0 = time.monotonic()
    status, _, body = t.request("GET", "/big", None, {})
    took = time.monotonic() - t0
    t.close()
    thread.join(5)
    assert status == 200 and len(body) == size
    assert took < 10, took


def test_stream_hands_a_chunked_body_to_the_sink_piece_by_piece(tmp_path: Path) -> None:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"ab", b"cde"))
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-log-start: 7\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    )
    thread = serve_once(tmp_path / "c.sock", answer)
    got: list[bytes] = []
    status, fields, rest = UnixTransport(tmp_path / "c.sock").stream("/log", got.append)
    thread.join(5)
    assert (status, rest, got) == (200, b"", [b"ab", b"cde"])
    assert fields["x-log-start"] == "7"


def _answer_after_eof(listener: socket.socket, got: threading.Event) -> None:
    """Read a request, then answer only once the client has shut its sending side (as
    the daemon answers a long-poll whose worker hangs up)."""
    conn, _ = listener.accept()
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        got.set()
        while conn.recv(65536):  # b"": the client's half-close
            pass
        conn.sendall(RESPONSE)


@pytest.mark.parametrize("when", ["in_flight", "before"])
def test_hang_up_half_closes_and_the_answer_is_still_read(tmp_path: Path, when: str) -> None:
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    got = threading.Event()
    threading.Thread(target=_answer_after_eof, args=(listener, got), daemon=True).start()
    transport = UnixTransport(path, timeout=5)
    if when == "before":  # a stop signal before the request: it is sent, then shut
        transport.hang_up()
        answer = transport.request("POST", "/v1/leases", b"{}", {})
    else:
        result: list[tuple[int, str, bytes]] = []
        t = threading.Thread(
            target=lambda: result.append(transport.request("POST", "/v1/leases", b"{}", {}))
        )
        t.start()
        assert got.wait(5)
        transport.hang_up()
        t.join(5)
        [answer] = result
    assert answer == (200, "text/plain", b"ok")
    transport.close()
    listener.close()


class ScriptedServer:
    """One connection: reads each request whole (head and ``Content-Length`` body), keeps
    it, and answers it with the next of ``answers``."""

    def __init__(self, path: Path, answers: list[bytes]) -> None:
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(1)
        self._answers = answers
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        self.connections += 1
        data = b""
        with conn:
            for answer in self._answers:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, data = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    data += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + data[:length])
                data = data[length:]
                conn.sendall(answer)

    def close(self) -> None:
        self._thread.join(5)
        self._listener.close()


def json_answer(status: str, body: bytes) -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        len(body),
        body,
    )


def test_each_kind_of_request_is_written_as_before(tmp_path: Path) -> None:
    """Request heads are encoded once per kind (method, path, fields) and reused: a path
    with ``%`` in it, a GET (no length), a POST without a body (length 0), and the same
    request again all go out as written before the cache."""
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    server = ScriptedServer(tmp_path / "s.sock", [ok] * 5)
    t = UnixTransport(tmp_path / "s.sock", timeout=5)
    json_ct = {"content-type": "application/json"}
    t.request("PATCH", "/v1/queues/a%2Fb%25d", b'{"x": 1}', json_ct)
    t.request("GET", "/v1/status", None, {})
    t.request("POST", "/v1/jobs/7/cancel", None, {})
    t.request("PATCH", "/v1/queues/a%2Fb%25d", b'{"x": 22}', json_ct)
    t.request("GET", "/v1/status", None, {})
    t.close()
    server.close()
    assert server.requests == [
        b"PATCH /v1/queues/a%2Fb%25d HTTP/1.1\r\nHost: localhost\r\n"
        b'content-type: application/json\r\nContent-Length: 8\r\n\r\n{"x": 1}',
        b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"POST /v1/jobs/7/cancel HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
        b"PATCH /v1/queues/a%2Fb%25d HTTP/1.1\r\nHost: localhost\r\n"
        b'content-type: application/json\r\nContent-Length: 9\r\n\r\n{"x": 22}',
        b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ]
    assert server.connections == 1


def test_the_kept_alive_connection_serves_on_after_an_error_answer(tmp_path: Path) -> None:
    from jobctl import errors
    from jobctl.client import Client

    missing = b'{"error": {"code": "not_found", "message": "no job 9"}}'
    server = ScriptedServer(
        tmp_path / "s.sock",
        [json_answer("404 Not Found", missing), json_answer("201 Created", b'{"id": 10}')],
    )
    client = Client(tmp_path / "s.sock", timeout=5)
    with pytest.raises(errors.NotFound, match="no job 9"):
        client.get(9)
    assert client.enqueue({"command": ["true"]}) == {"id": 10}
    client.close()
    server.close()
    assert server.connections == 1


def unread(sock: socket.socket) -> int:
    """Bytes waiting in ``sock``'s receive queue."""
    import fcntl
    import struct
    import termios

    got = fcntl.ioctl(sock, termios.FIONREAD, struct.pack("i", 0))
    return int(struct.unpack("i", got)[0])


@pytest.mark.parametrize(
    "cuts",
    [[5], [30], [45, 46, 47], [74, 75], [85]],
    ids=["status-line", "mid-head", "byte-by-byte", "head-end", "mid-body"],
)
def test_an_answer_arriving_in_pieces_is_read_whole(cuts: list[int]) -> None:
    """The answer is only in the socket piece by piece (each piece read before the next
    is sent): the first read has part of it only, the head or the body is cut."""
    answer = json_answer("201 Created", b'{"id": 1, "x": "yz"}')
    ours, theirs = socket.socketpair()
    t = UnixTransport(Path("/unused"), timeout=5)
    t._sock = ours  # the connection, as if connected
    got: list[tuple[int, str, bytes]] = []
    caller = threading.Thread(target=lambda: got.append(t._send("POST", "/x", b"{}", {})))
    caller.start()
    for start, end in zip([0, *cuts], [*cuts, len(answer)], strict=True):
        theirs.sendall(answer[start:end])
        deadline = time.monotonic() + 5
        while unread(ours) and time.monotonic() < deadline:  # until the client took it
            time.sleep(0.001)
    caller.join(5)
    assert got == [(201, "application/json", b'{"id": 1, "x": "yz"}')]
    assert theirs.recv(65536).startswith(b"POST /x HTTP/1.1\r\n")
    t.close()
    theirs.close()


def test_more_kinds_of_request_than_the_cache_holds_are_written_right(tmp_path: Path) -> None:
    """Past 64 kinds the cache of encoded heads starts again (a walk of pages sends a new
    path per page): each request is still written whole, on the one connection."""
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    paths = [f"/v1/jobs?cursor={i}" for i in range(150)]
    server = ScriptedServer(tmp_path / "s.sock", [ok] * len(paths))
    t = UnixTransport(tmp_path / "s.sock", timeout=5)
    assert [t.request("GET", p, None, {})[2] for p in paths] == [b"ok"] * len(paths)
    t.close()
    server.close()
    assert server.requests == [
        f"GET {p} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() for p in paths
    ]
    assert server.connections == 1

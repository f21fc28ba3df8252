"""The API transport's GIL-free writes: what the socket takes at once goes straight out,
everything else (and every error) is the real transport's, in order."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from jobctl.api.server import GilFreeWrites


class Recorder:
    """Stands in for uvloop's transport: records what it was asked to write."""

    def __init__(self, buffered: int = 0, closing: bool = False) -> None:
        self.written: list[bytes] = []
        self.buffered = buffered
        self.closing = closing

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def _drain(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_an_idle_transport_is_bypassed(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    rec = Recorder()
    t = GilFreeWrites(rec, a.fileno())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 201 Created\r\n\r\n")
    t.write(memoryview(b'{"id":1}'))
    assert _drain(b) == b'HTTP/1.1 201 Created\r\n\r\n{"id":1}' and rec.written == []
    assert t.get_extra_info("peername") == "info:peername"  # the rest is the transport's


def test_queued_data_keeps_its_place(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    rec = Recorder(buffered=10)  # the transport still holds bytes: ours must go after them
    GilFreeWrites(rec, a.fileno()).write(b"later")  # type: ignore[arg-type]
    assert rec.written == [b"later"] and _drain(b) == b""


def test_what_the_socket_does_not_take_goes_to_the_transport(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    data = os.urandom(1 << 20)  # more than a Unix socket buffers
    rec = Recorder()
    GilFreeWrites(rec, a.fileno()).write(data)  # type: ignore[arg-type]
    sent = _drain(b)
    assert 0 < len(sent) < len(data)
    assert sent + b"".join(rec.written) == data and len(rec.written) == 1


def test_errors_are_left_to_the_transport(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()  # the client went away: EPIPE
    rec = Recorder()
    GilFreeWrites(rec, a.fileno()).write(b"answer")  # type: ignore[arg-type]
    assert rec.written == [b"answer"]
    closing = Recorder(closing=True)
    GilFreeWrites(closing, a.fileno()).write(b"x")  # type: ignore[arg-type]
    assert closing.written == [b"x"]

"""Serving the API on a Unix socket with the caller's uid from the kernel.

The socket file is created with mode 0600 (0660 and the configured group when the
daemon runs as root), so the file system decides who may talk to the daemon. Each
connection's peer credentials (``SO_PEERCRED``) are read once and handed to every
request on it, which is how a job's owner is known without trusting the request body.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import socket
import struct
from collections.abc import Generator
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobctl.errors import DaemonLocked

_PEERCRED = struct.Struct("3i")


class GilFreeWrites:
    """A transport that sends without holding the GIL where it can.

    uvloop writes to the socket with the GIL held. On a Unix socket the write wakes the
    client, and the scheduler often runs the woken client on this CPU at once: the event
    loop is then descheduled *holding the GIL*, and the store's writer thread, next on
    the critical path of every request, cannot run a line of Python until the loop gets
    the CPU back. ``os.write`` releases the GIL around the system call. Only when the
    transport has nothing queued (else order would break) and only what the socket takes
    at once; the rest, and every error, is left to the transport as before.
    """

    def __init__(self, transport: asyncio.Transport, fd: int) -> None:
        self._transport = transport
        self._fd = fd

    def write(self, data: bytes | bytearray | memoryview) -> None:
        t = self._transport
        if not t.is_closing() and t.get_write_buffer_size() == 0:
            try:
                sent = os.write(self._fd, data)
            except OSError:  # would block, interrupted, or an error the transport reports
                sent = 0
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
        t.write(data)

    def __getattr__(self, name: str) -> Any:  # everything else is the real transport's
        return getattr(self._transport, name)


class PeerCredProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, plus the peer's credentials at accept in
    ``request.state`` (``peer_uid``, ``peer_gid``, ``peer_pid``) and writes that leave the
    GIL to other threads (:class:`GilFreeWrites`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is None or sock.family != socket.AF_UNIX:
            super().connection_made(transport)
            return
        super().connection_made(GilFreeWrites(transport, sock.fileno()))  # type: ignore[arg-type]
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        pid, uid, gid = _PEERCRED.unpack(raw)
        self.app_state = {**self.app_state, "peer_uid": uid, "peer_gid": gid, "peer_pid": pid}


class Server(uvicorn.Server):
    """A uvicorn server that leaves signals to the daemon (it shuts down in order).

    ``serving`` is set once it accepts connections: what systemd's ``READY=1`` promises.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.serving = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.serving.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind_socket(path: Path, group: str | None = None) -> socket.socket:
    """Create the listening socket; refuse if a live daemon already answers on it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755 if os.geteuid() == 0 else 0o700)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale socket of a dead daemon
        else:
            raise DaemonLocked(f"another daemon is listening on {path}", path=str(path))
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    if group is not None:
        os.chown(path, -1, grp.getgrnam(group).gr_gid)
        os.chmod(path, 0o660)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def make_server(app: Any) -> Server:
    config = uvicorn.Config(
        app,
        http=PeerCredProtocol,
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=5,
        loop="none",
    )
    return Server(config)

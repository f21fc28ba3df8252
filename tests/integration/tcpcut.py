"""A tiny TCP proxy a test can cut: a daemon pointed through it loses its database at
once (its connections closed) and cannot reconnect (new connections are accepted and
held silent, like a network that drops packets) until it is mended."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpCut:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(client)
                if self._cut:  # held: the connect never completes a start-up
                    continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def cut(self) -> None:
        """Close every connection now; hold every new one silent."""
        with self._lock:
            self._cut = True
            self._close_open()

    def mend(self) -> None:
        """Close the held connections (they fail, and are retried) and forward again."""
        with self._lock:
            self._cut = False
            self._close_open()

    def _close_open(self) -> None:
        for s in self._open:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._open.clear()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._server.close()
        with self._lock:
            self._close_open()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_RDWR)

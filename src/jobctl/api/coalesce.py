"""One write per answer: a response's head and its body leave in one system call.

uvicorn writes an answer in two writes, the head when the app sends
``http.response.start`` and the body when it sends ``http.response.body``. On the Unix
socket each write is a system call that wakes the client, which then finds a head
without its body and sleeps again: for a single-job enqueue the two writes were the
largest item of the daemon's profile (about a third of its event-loop thread's samples),
and the client's second wake-up took CPU from the same two cores. Every answer with a
``Content-Length`` (all of this API's but the streamed ones) is sent whole by an app
right after its head, so the head is held until the body's write and both are written
together. Answers without one (streamed, chunked) and HEAD answers (no body is written)
are written as before, head first.

Nothing else changes: uvicorn still renders the head (its checks, ``date``, ``server``,
``connection: close``) and decides keep-alive and closing; a held head is written before
any close, so an app that fails after its head leaves the same bytes on the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

Send = Callable[[Any], Awaitable[None]]


class HeldHead:
    """A connection's transport for its request cycles: holds one write (a head) when
    told to, and writes it joined with the next one (its body)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        #: Hold the next write: set for each answer's head by :func:`coalescing`.
        self.hold = False
        self._head: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + bytes(data))
        elif self.hold:
            self.hold = False
            self._head = bytes(data)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write a held head on its own (its body never came)."""
        head, self._head, self.hold = self._head, None, False
        if head is not None:
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing(), get_extra_info()…: the real one
        return getattr(self._transport, name)


def coalescing(send: Send, method: str, writer: HeldHead) -> Send:
    """``send`` (a uvicorn cycle's, for a request of ``method``), with the head of an
    answer that has a ``Content-Length`` held by ``writer`` until its body is written."""
    head_only = method == "HEAD"

    async def coalesced(message: Any) -> None:
        if message["type"] == "http.response.start":
            writer.hold = not head_only and _has_length(message.get("headers", ()))
        await send(message)

    return coalesced


def _has_length(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() == b"content-length" for name, _ in headers)

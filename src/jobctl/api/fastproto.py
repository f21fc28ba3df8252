"""``POST /v1/jobs`` answered by the server's protocol, without ASGI.

Enqueue is the one request a busy client sends thousands of times a second, and the
daemon's CPU per request bounds the single-job rate (issue 15: two cores shared by the
daemon, the database and the clients). After :mod:`jobctl.api.fast` had taken FastAPI
out of it, what was left around the insert itself was ASGI's per-request machinery: a
scope passed through three layers, each wrapping ``send`` in a closure, message dicts for
the body and for the head and body of the answer, uvicorn's header checks on headers
this module writes itself. Here the protocol (:class:`jobctl.api.server.
PeerCredProtocol`) hands such a request to a :class:`FastCycle`, a uvicorn request
cycle whose task reads the body straight from the cycle, asks :class:`FastEnqueue` for
the answer and writes it, head and body, in one write.

Behaviour is the ASGI path's by construction: :class:`FastEnqueue` runs the same code as
the layers it skips, in the same order (:meth:`AuditMiddleware.serve`: request id, 500s,
audit record; :meth:`policy.Gate.refusal`: peer-credential authorization;
:meth:`EnqueueFront.answer`: 415, the body's bounds, enqueue, its errors), and the cycle
is uvicorn's (keep-alive, pipelining, graceful shutdown, a client that goes away: the
protocol's code paths, unchanged). Only a plain request takes this path: ``POST
/v1/jobs`` exactly, HTTP/1.1, no ``Expect``, no upgrade, nothing ahead of it on its
connection, no access log; anything else goes through ASGI as before.
tests/api/test_fastpath_differential.py holds the two paths' answers equal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from jobctl.api import fast
from jobctl.api.fast import EnqueueFront, rendered, too_large, went_away
from jobctl.api.middleware import AuditMiddleware, Whole
from jobctl.api.policy import Gate, forbidden_body

if TYPE_CHECKING:
    from uvicorn._types import HTTPScope

Scope = MutableMapping[str, Any]
_ACCESS_LOGGER = logging.getLogger("uvicorn.access")


class FastEnqueue:
    """The answer to ``POST /v1/jobs`` from the layers of the ASGI app it stands for."""

    def __init__(self, audit: AuditMiddleware, gate: Gate, front: EnqueueFront) -> None:
        self._audit = audit
        self._gate = gate
        self._front = front

    def __call__(self, scope: Scope, cycle: FastCycle) -> Awaitable[Whole]:
        """(status, headers but uvicorn's, body) for the request of ``cycle``: the
        middleware's coroutine itself, not one more layer around it (each layer is
        entered again when the commit wakes the request)."""
        return self._audit.serve(scope, self._answer, cycle)

    async def _answer(self, scope: Scope, cycle: FastCycle) -> Whole:
        refused = self._gate.refusal(scope)
        if refused is not None:
            headers, data = rendered(forbidden_body(refused))
            return 403, headers, data
        status, body, extra = await self._front.answer(scope, cycle.read_body)
        headers, data = rendered(body, extra)
        return status, headers, data


class BodySignal:
    """``asyncio.Event`` as a request cycle uses it (``message_event``: the protocol sets
    it when body arrives, the body ends or the peer goes; :meth:`FastCycle.read_body`
    waits for it), made once per request: without the Event's waiter deque and loop
    binding. One waiter at most: the cycle's own task."""

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self) -> None:
        if self._flag:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter


class FastCycle(RequestResponseCycle):
    """uvicorn's request cycle for a ``POST /v1/jobs`` its protocol answers itself: the
    protocol feeds it (body, end, disconnect) and drives it (pipelining, keep-alive,
    shutdown) as any cycle; only its task differs."""

    def __init__(
        self,
        scope: HTTPScope,
        transport: asyncio.Transport,
        flow: FlowControl,
        logger: logging.Logger,
        default_headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        on_response: Callable[[], None],
    ) -> None:
        """``RequestResponseCycle.__init__`` for a request without ``Expect`` or access
        log, its attributes set straight (eleven keywords a request cost ~1 µs; issue 15).
        tests/api/test_fastcycle.py holds the attributes equal to uvicorn's."""
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.logger = logger
        self.access_logger = _ACCESS_LOGGER
        self.access_log = False
        self.default_headers = default_headers
        self.message_event = BodySignal()  # type: ignore[assignment]
        self.on_response = on_response
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = False
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding = None
        self.expected_content_length = 0

    async def run_asgi(self, app: Any) -> None:
        """``app``: the :class:`FastEnqueue`. Failures as uvicorn's ``run_asgi`` treats
        an app's (those of the answer itself are already a 500 answered)."""
        try:
            status, headers, data = await app(self.scope, self)
            await self._write(status, headers, data)
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self.transport.close()
        finally:
            self.on_response = lambda: None

    async def read_body(self) -> bytes:
        """The whole body, as uvicorn's ``receive`` hands it over chunk by chunk, with
        :func:`jobctl.api.fast._read_body`'s bounds and errors."""
        chunks: list[bytes] = []
        size = 0
        while True:
            if not self.disconnected and not self.response_complete:
                self.flow.resume_reading()
                if not self.message_event.is_set():
                    await self.message_event.wait()
                self.message_event.clear()
            if self.disconnected or self.response_complete:
                raise went_away()
            chunk = bytes(self.body)
            self.body = bytearray()
            size += len(chunk)
            if size > fast.MAX_BODY:  # (looked up here: a test lowers it)
                raise too_large()
            chunks.append(chunk)
            if not self.more_body:
                return chunk if len(chunks) == 1 else b"".join(chunks)

    async def _write(self, status: int, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
        """What uvicorn's ``send`` does with a head and a whole body, in one write."""
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        self.response_started = True
        out = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            out += (name, b": ", value, b"\r\n")
        for name, value in headers:
            out += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            out.append(b"connection: close\r\n")
        out += (b"\r\n", data)
        self.transport.write(b"".join(out))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

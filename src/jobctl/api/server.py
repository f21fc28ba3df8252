"""Serving the API on a Unix socket with the caller's uid from the kernel.

The socket file is created with mode 0600 (0660 and the configured group when the
daemon runs as root), so the file system decides who may talk to the daemon. Each
connection's peer credentials (``SO_PEERCRED``) are read once and handed to every
request on it, which is how a job's owner is known without trusting the request body.

Connections are bounded (:class:`ConnectionLimits`, enforced by :class:`Gate` and the
protocol): per peer uid and in total (admins: root, the daemon's own user and the admin
group, are held to their per-uid bound only, so one user's hog cannot lock an
administrator out), a request's
headers in size and in time, and a kept-alive connection's silence (uvicorn's
``timeout_keep_alive``). A connection over a bound is answered at once with a JSON error
and closed; it never waits in the daemon holding a descriptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import grp
import json
import logging
import os
import resource
import socket
import struct
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from jobctl.api.coalesce import HeldHead, coalescing
from jobctl.api.fastproto import FastCycle, FastEnqueue
from jobctl.api.worksignal import Hangup
from jobctl.errors import DaemonLocked

_PEERCRED = struct.Struct("3i")
log = logging.getLogger("jobctl.api")


@dataclass(frozen=True)
class ConnectionLimits:
    """Bounds on API connections (settings ``max_connections``, ``max_connections_per_uid``,
    ``max_header_bytes``, ``header_timeout``, ``idle_timeout``; docs/security.md)."""

    total: int = 512
    per_uid: int = 64
    header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    idle_timeout: float = 5.0


class Gate:
    """Counts open connections per peer uid and in total; admits or refuses new ones.

    The total is also held to half the open-file limit, so connections can never take
    the descriptors that running commands and the store need.
    """

    def __init__(
        self,
        limits: ConnectionLimits,
        nofile: int | None = None,
        is_admin: Callable[[int], bool] | None = None,
    ) -> None:
        self.limits = limits
        if nofile is None:
            nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.total_cap = max(1, min(limits.total, nofile // 2))
        self.total = 0
        self.by_uid: dict[int, int] = {}
        privileged = {0, os.geteuid()}
        #: Admins (root, the daemon's user, the admin group) pass the total; asked only
        #: when the total is reached.
        self._is_admin = is_admin or privileged.__contains__
        self._logged: dict[int, float] = {}

    def admit(self, uid: int) -> str | None:
        """Count a new connection of ``uid``; or the reason it is refused (not counted)."""
        mine = self.by_uid.get(uid, 0)
        if mine >= self.limits.per_uid:
            return self._refused(uid, f"uid {uid} has {mine} connections open (limit per uid)")
        if self.total >= self.total_cap and not self._is_admin(uid):
            return self._refused(uid, f"{self.total} connections open (limit in total)")
        self.by_uid[uid] = mine + 1
        self.total += 1
        return None

    def release(self, uid: int) -> None:
        left = self.by_uid.get(uid, 0) - 1
        if left > 0:
            self.by_uid[uid] = left
        else:
            self.by_uid.pop(uid, None)
        self.total -= 1

    def _refused(self, uid: int, reason: str) -> str:
        now = time.monotonic()  # one log line per uid per 10 s: refusals come in floods
        if now - self._logged.get(uid, -1e9) >= 10:
            self._logged[uid] = now
            log.warning("event=connection_refused uid=%d reason=%s", uid, json.dumps(reason))
        return f"too many connections: {reason}; try again shortly"


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
        # Asked on every request (here and by the protocol): bound once, not looked up
        # through __getattr__ each time.
        self.is_closing = transport.is_closing
        self.get_write_buffer_size = transport.get_write_buffer_size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.is_closing() and self.get_write_buffer_size() == 0:
            try:
                sent = os.write(self._fd, data)
            except OSError:  # would block, interrupted, or an error the transport reports
                sent = 0
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:  # everything else is the real transport's
        return getattr(self._transport, name)


class PeerCredProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, plus the peer's uid, gid and pid (``SO_PEERCRED`` at accept)
    in ``request.state.peer_uid`` / ``peer_gid`` / ``peer_pid``, writes that leave the GIL
    to other threads (:class:`GilFreeWrites`), each answer in one write
    (:mod:`jobctl.api.coalesce`) and the connection bounds of a :class:`Gate`: count per
    uid, header size and header time."""

    def __init__(
        self, *args: Any, gate: Gate | None = None, fast: FastEnqueue | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._gate = gate
        #: Answers a plain ``POST /v1/jobs`` without ASGI (:mod:`jobctl.api.fastproto`).
        self._fast = fast
        self._counted: int | None = None  # the uid this connection counts against
        self._header_bytes = 0  # of the request whose headers are being read
        self._in_headers = True
        self._boundary = False  # a request ended in the chunk being read
        #: When the headers being read began (loop time); None between requests.
        self._header_started: float | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        #: The peer sent no more (``request.state.hangup``: a long-poll reads it).
        self._hangup = Hangup()
        #: Half-closed with a request in flight: its answer is written, then the close.
        self._answer_then_close = False
        self._writer: HeldHead | None = None  # the request cycles' transport
        #: Since when (loop time) the connection waits for a next request; None while
        #: a request is being read or answered (see :meth:`on_response_complete`).
        self._idle_since: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is None or sock.family != socket.AF_UNIX:
            super().connection_made(transport)
            self._writer = HeldHead(self.transport)
            return
        super().connection_made(GilFreeWrites(transport, sock.fileno()))  # type: ignore[arg-type]
        self._writer = HeldHead(self.transport)
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        pid, uid, gid = _PEERCRED.unpack(raw)
        self.app_state = {
            **self.app_state,
            "peer_uid": uid,
            "peer_gid": gid,
            "peer_pid": pid,
            "hangup": self._hangup,
        }
        if self._gate is None:
            return
        refused = self._gate.admit(uid)
        if refused is not None:
            self._answer(503, "too_many_connections", refused, b"retry-after: 1\r\n")
            return
        self._counted = uid
        self._header_started = self.loop.time()
        self._arm_header_timer(self._gate.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self._idle_since = None
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        if self._gate is not None and self._counted is not None:
            self._gate.release(self._counted)
            self._counted = None
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio allows True
        """The peer sent no more. uvicorn closes at once (its answer to a request in
        flight is then dropped); a long-poll read whole (``Hangup.answers``) is still
        answered here, then the connection closed: a worker that half-closes its lease
        request to stop reads that answer (with any lease granted before the end, which
        it releases). Anything else is closed on as before."""
        self._hangup.set()
        cycle = self.cycle
        if not self._hangup.answers or cycle is None or cycle.response_complete:
            return None
        self._answer_then_close = True
        return True

    def _unset_keepalive_if_required(self) -> None:
        """Data came in (uvicorn calls this from ``data_received``): the connection is
        no longer idle. The timer stays armed; when it fires it finds nothing to close
        (:meth:`_keep_alive_fired`)."""
        self._idle_since = None

    def on_response_complete(self) -> None:
        """uvicorn's, with its keep-alive timeout armed once per connection instead of
        once per request: arming and cancelling a timer (``call_later`` + ``cancel``)
        on every single-job enqueue cost a few µs of the loop (issue 15). The connection
        is closed at the same moment as uvicorn's: ``timeout_keep_alive`` seconds after
        its last answer if nothing came in since."""
        self.server_state.total_requests += 1
        if not self.transport.is_closing():
            self.flow.resume_reading()
            if self.pipeline:
                self._idle_since = None
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
            else:
                self._idle_since = self.loop.time()
                if self.timeout_keep_alive_task is None:
                    self.timeout_keep_alive_task = self.loop.call_later(
                        self.timeout_keep_alive, self._keep_alive_fired
                    )
        last = self.cycle
        if (
            self._answer_then_close
            and not self.pipeline
            and (last is None or last.response_complete)
        ):
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self._boundary = False
        super().data_received(data)
        if self._gate is None or not self._in_headers or self.transport.is_closing():
            return
        if self._boundary:  # a request ended in this chunk: its tail is no header
            return
        # Still inside a request's headers after this chunk: httptools keeps a partial
        # header in memory, so an endless one is cut off here.
        self._header_bytes += len(data)
        limit = self._gate.limits.header_bytes
        if self._header_bytes > limit:
            message = f"the request headers are over {limit} bytes"
            self._answer(431, "header_too_large", message)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._hangup.answers = False
        if self._gate is None:
            return
        if self._header_started is None:  # the first request's runs from the connect
            self._header_started = self.loop.time()
        if self._header_timer is None:
            self._arm_header_timer(self._gate.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        self._header_started = None  # the timer, when it fires, finds nothing to time
        if self._fast is not None and self._plain_enqueue():
            self._start_fast(self._fast)
            return
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope and self._writer is not None:
            # a new request's cycle (not an upgrade's): its answer leaves in one write.
            # Its task has not run yet, so run_asgi hands the app this send.
            cycle.transport = self._writer  # type: ignore[assignment]
            cycle.send = coalescing(cycle.send, self.scope["method"], self._writer)  # type: ignore[method-assign,assignment]

    def _plain_enqueue(self) -> bool:
        """A ``POST /v1/jobs`` the fast path may answer: anything unusual about it, or
        an answer still owed on the connection (pipelining), and it goes through ASGI."""
        parser = self.parser
        cycle = self.cycle
        return (
            self.url == b"/v1/jobs"
            and parser.get_method() == b"POST"
            and parser.get_http_version() == "1.1"
            and not self.expect_100_continue
            and not parser.should_upgrade()
            and not self.access_log
            and self.limit_concurrency is None
            and (cycle is None or cycle.response_complete)
        )

    def _start_fast(self, fast: FastEnqueue) -> None:
        """What uvicorn's ``on_headers_complete`` does, for a :class:`FastCycle`."""
        scope = self.scope
        scope["method"] = "POST"
        scope["path"] = "/v1/jobs"
        scope["raw_path"] = b"/v1/jobs"
        scope["query_string"] = b""
        self.cycle = FastCycle(
            scope,
            self.transport,
            self.flow,
            self.logger,
            self.server_state.default_headers,
            self.parser.should_keep_alive(),
            self.on_response_complete,
        )
        self._start_asgi_task(self.cycle, fast)  # type: ignore[arg-type]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_headers = True
        self._header_bytes = 0
        self._boundary = True

    def _keep_alive_fired(self) -> None:
        """Close the connection if it has been idle ``timeout_keep_alive`` seconds; if
        it is idle for less, wait for the rest; if busy, the next answer arms again."""
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_fired)
        else:
            self.timeout_keep_alive_handler()

    def _arm_header_timer(self, delay: float) -> None:
        """One timer per connection, armed once and checked when it fires: arming and
        cancelling one per request (``call_later`` + ``cancel``) cost ~4 µs of each
        single-job enqueue, for a timer that almost never fires."""
        self._header_timer = self.loop.call_later(delay, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        """408 if the headers being read began ``header_timeout`` ago; else wait for the
        rest of the current headers' time, or for the next request (none is being read)."""
        self._header_timer = None
        started = self._header_started
        if self._gate is None or started is None or self.transport.is_closing():
            return
        left = started + self._gate.limits.header_timeout - self.loop.time()
        if left > 0:
            self._arm_header_timer(left)
        elif self._in_headers:
            self._answer(408, "header_timeout", "the request headers took too long")

    def _answer(self, status: int, code: str, message: str, extra: bytes = b"") -> None:
        """Answer with a JSON error and close, whatever state the request is in."""
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        head = b"content-type: application/json\r\nconnection: close\r\n" + extra
        length = b"content-length: %d\r\n\r\n" % len(body)
        self.transport.write(b"".join([STATUS_LINE[status], head, length, body]))
        self.transport.close()


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
    """Create the listening socket; refuse if a live daemon already answers on it.

    Its directory is made 0700, or 0755 for root (so the socket's group can reach the
    socket, as systemd's ``RuntimeDirectoryMode=0755`` does), whatever the umask.
    """
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755 if os.geteuid() == 0 else 0o700)
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


def make_server(
    app: Any,
    limits: ConnectionLimits | None = None,
    is_admin: Callable[[int], bool] | None = None,
    fast_path: bool = True,
) -> Server:
    """``fast_path``: answer a plain ``POST /v1/jobs`` without ASGI when the app offers it
    (``app.fast_enqueue``, :mod:`jobctl.api.fastproto`); off, it goes through ASGI (the
    differential test compares the two)."""
    limits = limits or ConnectionLimits()
    gate = Gate(limits, is_admin=is_admin)
    if gate.total_cap < limits.total:
        log.warning(
            "event=max_connections_lowered max_connections=%d to=%d reason=%s",
            limits.total,
            gate.total_cap,
            json.dumps("half the open-file limit"),
        )
    fast = getattr(app, "fast_enqueue", None) if fast_path else None
    config = uvicorn.Config(
        app,
        http=functools.partial(PeerCredProtocol, gate=gate, fast=fast),  # type: ignore[arg-type]
        lifespan="off",
        access_log=False,
        log_config=None,
        # X-Forwarded-* rewriting is for TCP behind a proxy; on the Unix socket it was one
        # more ASGI layer (a coroutine and a header scan) in every request, enqueue's too.
        proxy_headers=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=limits.idle_timeout,  # type: ignore[arg-type]
        loop="none",
    )
    return Server(config)

"""The webhook client (engine/httpclient.py) and its connections per target
(engine/httppool.py), against a real server on 127.0.0.1 that answers scripted raw bytes:
how an answer's body ends (Content-Length, chunked, the close), what is kept (the first
4 KiB), which answers are refused, timeouts, and when a connection is reused."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import pytest

from jobctl.domain.http import TAIL_BYTES
from jobctl.engine import httppool
from jobctl.engine.httpclient import Answer, BadAnswer, request_bytes
from jobctl.engine.httppool import Target, TargetPools

IP = ipaddress.ip_address("127.0.0.1")
OK = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
HOLD = b""  # an answer never sent (a receiver that does not answer)


class Server:
    """Answers each request (head and Content-Length body read) with the next scripted
    bytes (the last one again once the script is used up); ``close_after`` closes the
    connection after that answer."""

    def __init__(self, *answers: bytes, close_after: bool = False) -> None:
        self.answers = list(answers) or [OK]
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.listening: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        size = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(size))
                answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
                if answer == HOLD:
                    await asyncio.Event().wait()
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def target(self) -> Target:
        return ("http", "127.0.0.1", self.port, IP)


@pytest.fixture
async def serve() -> AsyncIterator[list[Server]]:
    servers: list[Server] = []
    yield servers
    for srv in servers:
        if srv.listening is not None:
            srv.listening.close()
        for task in srv.tasks:
            task.cancel()
        await asyncio.gather(*srv.tasks, return_exceptions=True)


async def _start(serve: list[Server], srv: Server) -> Server:
    srv.listening = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.port = srv.listening.sockets[0].getsockname()[1]
    serve.append(srv)
    return srv


def _get(path: str = "/") -> bytes:
    return request_bytes("GET", path, "127.0.0.1", {}, b"")


async def _one(pools: TargetPools, srv: Server, data: bytes | None = None) -> Answer:
    return await pools.exchange(srv.target, data or _get())


async def test_one_target_reuses_its_connection(serve: list[Server]) -> None:
    srv = await _start(serve, Server())
    pools = TargetPools(5.0)
    for _ in range(5):
        assert (await _one(pools, srv)).status == 204
    assert srv.connections == 1 and pools.idle(srv.target) == 1
    await pools.close()


async def test_requests_at_once_have_a_connection_each(serve: list[Server]) -> None:
    srv = await _start(serve, Server())
    pools = TargetPools(5.0)
    answers = await asyncio.gather(*(_one(pools, srv) for _ in range(3)))
    assert [a.status for a in answers] == [204] * 3
    assert srv.connections == 3 and pools.idle(srv.target) == 3
    other: Target = ("http", "localhost", srv.port, IP)
    await pools.exchange(other, _get())  # another name on that address: another connection
    assert srv.connections == 4 and pools.idle(other) == 1
    await pools.close()


async def test_the_least_recently_used_target_is_closed_past_the_bound(
    serve: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(httppool, "MAX_IDLE", 2)
    srv = await _start(serve, Server())
    pools = TargetPools(5.0)
    for host in ("a.example", "b.example", "a.example", "c.example"):
        await pools.exchange(("http", host, srv.port, IP), _get())
    assert srv.connections == 3  # a.example's connection was reused
    assert pools.idle(("http", "b.example", srv.port, IP)) == 0  # least recently used
    assert pools.idle(("http", "a.example", srv.port, IP)) == 1
    assert pools.idle(("http", "c.example", srv.port, IP)) == 1
    await pools.close()


async def test_the_request_is_sent_as_built(serve: list[Server]) -> None:
    srv = await _start(serve, Server())
    pools = TargetPools(5.0)
    body = b'{"n": 1}'
    data = request_bytes("POST", "/h?x=ü", "hooks.example:8080", {"X-Team": "ops"}, body)
    await _one(pools, srv, data)
    head, _, sent = srv.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /h?x=%C3%BC HTTP/1.1"
    assert "host: hooks.example:8080" in lines and "X-Team: ops" in lines
    assert "content-length: 8" in lines and sent == body
    assert any(x.startswith("user-agent: jobctl-webhook/") for x in lines)
    assert b"content-length: 0" in request_bytes("PUT", "/", "h", {}, b"")
    assert b"content-length" not in request_bytes("GET", "/", "h", {}, b"")
    with pytest.raises(ValueError):
        request_bytes("GET", "/", "h", {"X-Name": "café"}, b"")
    await pools.close()


@pytest.mark.parametrize(
    ("raw", "tail"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: 1\r\n\r\n",
            "hello",
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok", "ok"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\na\x00b", "ab"),
    ],
)
async def test_an_answers_body_is_read_to_its_end_and_kept(
    serve: list[Server], raw: bytes, tail: str
) -> None:
    srv = await _start(serve, Server(raw, OK))
    pools = TargetPools(5.0)
    answer = await _one(pools, srv)
    assert answer.tail == tail and answer.status in (200, 201)
    assert (await _one(pools, srv)).status == 204  # read to its end: reused
    assert srv.connections == 1
    await pools.close()


async def test_a_body_until_the_close_and_connection_close_are_not_reused(
    serve: list[Server],
) -> None:
    srv = await _start(serve, Server(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", close_after=True))
    pools = TargetPools(5.0)
    assert (await _one(pools, srv)).tail == "until the end"
    assert pools.idle(srv.target) == 0
    srv.answers = [
        b"HTTP/1.1 503 Busy\r\nConnection: close\r\nRetry-After: 7\r\ncontent-length: 0\r\n\r\n"
    ]
    answer = await _one(pools, srv)
    assert (answer.status, answer.retry_after) == (503, "7")
    assert pools.idle(srv.target) == 0 and srv.connections == 2
    await pools.close()


async def test_only_the_first_4_kib_are_read_then_the_connection_is_dropped(
    serve: list[Server],
) -> None:
    big = b"x" * (2 * TAIL_BYTES)  # of the 1 MB announced: the rest is never read
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n"
    srv = await _start(serve, Server(head + big))
    pools = TargetPools(5.0)
    answer = await _one(pools, srv)
    assert answer.tail == "x" * TAIL_BYTES
    assert pools.idle(srv.target) == 0
    await pools.close()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n", "two different"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "invalid Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", "invalid chunk size"),
        (b"HTTP/1.1 101 Switching\r\n\r\n", "unexpected HTTP 101"),
        (b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "malformed header line"),
    ],
)
async def test_a_malformed_answer_is_a_failed_attempt(
    serve: list[Server], raw: bytes, why: str
) -> None:
    srv = await _start(serve, Server(raw))
    pools = TargetPools(5.0)
    with pytest.raises(BadAnswer, match=why):
        await _one(pools, srv)
    assert pools.idle(srv.target) == 0
    await pools.close()


async def test_a_receiver_closing_mid_answer_is_a_failure(serve: list[Server]) -> None:
    srv = await _start(
        serve, Server(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", close_after=True)
    )
    pools = TargetPools(5.0)
    with pytest.raises(ConnectionError, match="before its answer ended"):
        await _one(pools, srv)
    await pools.close()


async def test_a_read_that_waits_too_long_times_out(serve: list[Server]) -> None:
    srv = await _start(serve, Server(HOLD))
    pools = TargetPools(0.2)
    with pytest.raises(TimeoutError, match=r"no answer within 0\.2s"):
        await _one(pools, srv)
    assert pools.idle(srv.target) == 0
    await pools.close()


async def test_a_connection_the_peer_closed_or_idle_too_long_is_not_reused(
    serve: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = await _start(serve, Server())
    pools = TargetPools(5.0)
    await _one(pools, srv)
    srv.writers[0].close()  # the receiver drops the idle connection
    await srv.writers[0].wait_closed()
    for _ in range(100):  # the client sees the close within a few loop turns
        if not httppool._alive(pools._free[srv.target][0]):
            break
        await asyncio.sleep(0.01)
    assert (await _one(pools, srv)).status == 204
    assert srv.connections == 2
    monkeypatch.setattr(httppool, "KEEPALIVE_IDLE", 0.0)  # every idle connection is too old
    assert (await _one(pools, srv)).status == 204
    assert srv.connections == 3
    await pools.close()


async def test_a_refused_connection_is_an_oserror(serve: list[Server]) -> None:
    srv = await _start(serve, Server())
    assert srv.listening is not None
    srv.listening.close()  # nobody listens on that port any more
    pools = TargetPools(5.0)
    with pytest.raises(ConnectionRefusedError):
        await _one(pools, srv)
    await pools.close()

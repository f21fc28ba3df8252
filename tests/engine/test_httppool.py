"""The webhook connections (engine/httppool.py): a client per connection, per target
(host, port, pinned address), given back and reused, never shared by two requests at
once; past MAX_IDLE idle clients the least recently used targets's idle clients are closed. A real
keep-alive server on 127.0.0.1 counts the connections."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import pytest

from jobctl.engine import httppool
from jobctl.engine.httppool import TargetPools

IP = ipaddress.ip_address("127.0.0.1")


class Server:
    def __init__(self) -> None:
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    listening = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.port = listening.sockets[0].getsockname()[1]
    yield srv
    listening.close()


async def _get(pools: TargetPools, port: int) -> int:
    async with pools.client(("127.0.0.1", port, IP)) as client:
        return (await client.get(f"http://127.0.0.1:{port}/")).status_code


async def test_one_target_reuses_its_connection(server: Server) -> None:
    pools = TargetPools(5.0)
    for _ in range(5):
        assert await _get(pools, server.port) == 204
    assert server.connections == 1
    await pools.close()


async def test_requests_at_once_have_a_client_each(server: Server) -> None:
    pools = TargetPools(5.0)
    target = ("127.0.0.1", server.port, IP)
    async with pools.client(target) as one, pools.client(target) as two:
        assert one is not two
        await asyncio.gather(one.get(f"http://127.0.0.1:{server.port}/"),
                             two.get(f"http://127.0.0.1:{server.port}/"))  # fmt: skip
    async with pools.client(target) as again:
        assert again in (one, two)  # given back, reused
    other = ("127.0.0.1", server.port, ipaddress.ip_address("127.0.0.2"))
    async with pools.client(other) as elsewhere:
        assert elsewhere not in (one, two)  # another pinned address: another pool
    assert server.connections == 2
    await pools.close()
    assert one.is_closed and two.is_closed and elsewhere.is_closed


async def test_the_least_recently_used_target_is_closed_past_the_bound(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(httppool, "MAX_IDLE", 2)
    pools = TargetPools(5.0)
    made = []
    for host in ("a.example", "b.example", "a.example", "c.example"):
        async with pools.client((host, server.port, IP)) as client:
            made.append(client)
    assert made[0] is made[2]  # a.example's client, reused
    assert made[1].is_closed  # b.example: the least recently used when c.example came
    assert not made[0].is_closed and not made[3].is_closed
    await pools.close()

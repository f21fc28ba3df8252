"""A real HTTP receiver on 127.0.0.1 for webhook tests: asyncio streams, HTTP/1.1 with
Content-Length, answers from a script. No client is mocked: the daemon's httpx client
talks to this server over a real TCP socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0  # seconds before answering (a slow receiver)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class Receiver:
    port: int = 0
    script: list[Answer] = field(default_factory=list)  # one per request; then the last
    seen: list[Seen] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends a held answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def requests(self, count: int, timeout: float = 10) -> list[Seen]:
        async with asyncio.timeout(timeout):
            while len(self.seen) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.seen

    def _answer(self) -> Answer:
        n = len(self.seen) - 1
        return self.script[min(n, len(self.script) - 1)] if self.script else Answer()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.seen.append(Seen(method, path, headers, body))
        self.arrived.set()
        answer = self._answer()
        if answer.delay < 0:  # hold until released (a receiver that never answers)
            await self.release.wait()
        elif answer.delay:
            await asyncio.sleep(answer.delay)
        extra = "".join(f"{k}: {v}\r\n" for k, v in answer.headers)
        writer.write(
            f"HTTP/1.1 {answer.status} X\r\ncontent-length: {len(answer.body)}\r\n{extra}\r\n"
            .encode() + answer.body
        )  # fmt: skip
        await writer.drain()
        return True


@asynccontextmanager
async def receiving(*script: Answer) -> AsyncIterator[Receiver]:
    rec = Receiver(script=list(script))
    server = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
    rec.port = server.sockets[0].getsockname()[1]
    try:
        yield rec
    finally:
        rec.release.set()
        server.close()
        await server.wait_closed()

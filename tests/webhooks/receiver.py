"""A real HTTP receiver on 127.0.0.1 for webhook tests: asyncio streams, HTTP/1.1 with
Content-Length, answers from a script, over TLS when asked. No client is mocked: the
daemon's client (engine/httpclient.py) talks to this server over a real TCP socket."""

from __future__ import annotations

import asyncio
import ssl
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
    host: str = "127.0.0.1"
    scheme: str = "http"
    script: list[Answer] = field(default_factory=list)  # one per request; then the last
    seen: list[Seen] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends a held answer

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

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
async def receiving(
    *script: Answer, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> AsyncIterator[Receiver]:
    """A receiver listening on ``host``; with ``tls``, an https one."""
    rec = Receiver(host=host, scheme="https" if tls else "http", script=list(script))
    server = await asyncio.start_server(rec.handle, host, 0, ssl=tls)
    rec.port = server.sockets[0].getsockname()[1]
    try:
        yield rec
    finally:
        rec.release.set()
        server.close()
        await server.wait_closed()


class ThreadReceiver:
    """The same receiver for a daemon in another process: http.server on a thread, each
    request kept raw (head and body as they arrived) for ``jobctl webhook verify``."""

    def __init__(self, status: int = 200) -> None:
        import http.server
        import threading

        self.raw: list[bytes] = []
        self.got = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                head = f"{self.requestline}\r\n{self.headers}".rstrip("\r\n") + "\r\n\r\n"
                owner.raw.append(head.encode("latin-1") + body)
                owner.got.set()
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_POST = do_GET = do_PUT = _any

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""The server's enqueue fast path (:mod:`jobctl.api.fastproto`) answers as ASGI does.

Two real servers on real Unix sockets, each with its own SQLite store on the same fake
clock: one answers a plain ``POST /v1/jobs`` at the protocol, the other with the fast
path off, so every request goes through ASGI (the audit middleware, the authorization
gate, :class:`EnqueueFront`), as before the fast path. The same requests (good, keyed,
the same key again, a conflicting key, bad JSON, an invalid field, wrong and missing
content types, too large, a batch, chunked, pipelined, ``Connection: close``, a refused
user, a failing store) get the same status, body and headers (but ``date`` and the
request id's value) from both, on the wire, and leave the same audit records.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import random
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from jobctl import errors
from jobctl.access import Access
from jobctl.api import fast
from jobctl.api.admission import Admission
from jobctl.api.app import Hooks, create_app
from jobctl.api.server import bind_socket, make_server
from jobctl.domain.clock import FakeClock
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.conftest import T0, migrated

FAR = {"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}
Answer = tuple[int, list[tuple[str, str]], Any]


def post(body: bytes, *headers: str, path: str = "/v1/jobs", chunked: bool = False) -> bytes:
    """One raw request (Content-Type JSON unless ``headers`` name one)."""
    lines = [f"POST {path} HTTP/1.1", "Host: jobctl", *headers]
    if not any(h.lower().startswith("content-type:") for h in headers):
        lines.append("Content-Type: application/json")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        half = len(body) // 2
        parts = [body[:half], body[half:]]
        wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\n\r\n"
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + wire
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def js(obj: Any) -> bytes:
    return orjson.dumps(obj)


#: (name, raw bytes of one or more requests on one connection, answers expected)
MATRIX: list[tuple[str, bytes, int]] = [
    ("good", post(js(FAR)), 1),
    ("keyed", post(js({**FAR, "key": "k-1"})), 1),
    ("the same key again", post(js({**FAR, "key": "k-1"})), 1),
    ("a conflicting key", post(js({"command": ["false"], "key": "k-1"})), 1),
    ("bad JSON", post(b'{"command": ['), 1),
    ("an invalid field", post(js({"command": []})), 1),
    ("an occurrence's key", post(js({**FAR, "key": "sch-1@2030-01-01T00:00:00Z"})), 1),
    ("wrong content type", post(js(FAR), "Content-Type: text/plain"), 1),
    ("no content type", post(js(FAR), "Content-Type: application/x-www-form-urlencoded"), 1),
    ("a +json content type", post(js(FAR), "Content-Type: application/vnd.x+json"), 1),
    ("too large", post(b"[" + b" " * 600 + b"]"), 1),
    ("a batch", post(js([FAR, {**FAR, "key": "k-2"}])), 1),
    ("an empty batch", post(b"[]"), 1),
    ("chunked", post(js({**FAR, "key": "k-3"}), chunked=True), 1),
    ("a trailing slash", post(js(FAR), path="/v1/jobs/"), 1),
    ("a query string", post(js(FAR), path="/v1/jobs?x=1"), 1),
    ("pipelined", post(js(FAR)) + post(js({**FAR, "key": "k-4"})) + post(b"{"), 3),
    ("connection close", post(js(FAR), "Connection: close"), 1),
]


class Daemon:
    """A real server on a Unix socket over its own store; ``fast``: the fast path on."""

    def __init__(
        self, tmp: Path, template: Path, fast_path: bool, access: Access, **hooks: Any
    ) -> None:
        tmp.mkdir(mode=0o755, exist_ok=True)
        self.clock = FakeClock(T0)
        name = "fast" if fast_path else "asgi"
        self.store = SqliteStore(
            migrated(template, tmp / f"{name}.db"), self.clock, random.Random(1)
        )
        self.astore = AsyncStore(self.store, threads=2)
        self.app = create_app(self.astore, Hooks(access=access, **hooks))
        self.fast_served = 0
        if fast_path:
            inner = self.app.fast_enqueue

            async def counted(scope: Any, cycle: Any) -> Any:
                self.fast_served += 1
                return await inner(scope, cycle)

            self.app.fast_enqueue = counted
        self.server = make_server(self.app, fast_path=fast_path)
        self.path = tmp / f"{name}.sock"

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Daemon]:
        sock = bind_socket(self.path)
        task = asyncio.create_task(self.server.serve(sockets=[sock]))
        await self.server.serving.wait()
        try:
            yield self
        finally:
            self.server.should_exit = True
            await task
            self.astore.close()
            self.store.close()

    async def exchange(self, raw: bytes, answers: int) -> tuple[list[Answer], bool]:
        """Send ``raw`` in one write; the answers, and whether the daemon then closed."""
        reader, writer = await asyncio.open_unix_connection(str(self.path))
        try:
            writer.write(raw)
            await writer.drain()
            got = [await _answer(reader) for _ in range(answers)]
            closed = await _closed(reader)
            return got, closed
        finally:
            writer.close()


async def _answer(reader: asyncio.StreamReader) -> Answer:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [tuple(h.split(": ", 1)) for h in lines[1:] if h]
    length = int(next(v for k, v in headers if k == "content-length"))
    body = orjson.loads(await reader.readexactly(length))
    return status, [(k, v) for k, v in headers], body


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the daemon closed the connection (no more bytes come either way)."""
    try:
        return await asyncio.wait_for(reader.read(1), 0.2) == b""
    except TimeoutError:
        return False


def _comparable(answer: Answer) -> Answer:
    """The answer with what differs between any two daemons masked: the ``date``, the
    request id (its form kept, and where a 500's body quotes it) and the random half of
    generated job keys."""
    status, headers, body = answer
    rid = next(v for k, v in headers if k == "x-request-id")
    assert re.fullmatch(r"[0-9a-f]{16}", rid)
    masked = [(k, "<id>" if k == "x-request-id" else v) for k, v in headers if k != "date"]
    text = orjson.dumps(body).decode().replace(rid, "<id>")
    text = re.sub(r'"job-([0-9a-f]{12})[0-9a-f]{16}"', r'"job-\1<random>"', text)
    return status, masked, orjson.loads(text)


@pytest.fixture(autouse=True)
def small_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "Too large" at 512 bytes (the real bound, 256 MiB, is a lot to send)."""
    monkeypatch.setattr(fast, "MAX_BODY", 512)


async def test_the_fast_path_answers_every_request_as_asgi_does(
    tmp_path: Path, sqlite_template: Path
) -> None:
    access = Access(tmp_path / "jobctl.allow", tmp_path / "jobctl.deny")
    quick = Daemon(tmp_path, sqlite_template, True, access)
    slow = Daemon(tmp_path, sqlite_template, False, access)
    async with quick.running(), slow.running():
        for name, raw, answers in MATRIX:
            got_fast, closed_fast = await quick.exchange(raw, answers)
            got_asgi, closed_asgi = await slow.exchange(raw, answers)
            assert [_comparable(a) for a in got_fast] == [_comparable(a) for a in got_asgi], name
            assert closed_fast == closed_asgi, name
        statuses = [a[0] for a in got_fast]  # the last row's: closed after its answer
        assert statuses == [201] and closed_fast
        # the rows the fast path takes (POST /v1/jobs exactly, nothing owed before them)
        assert quick.fast_served >= 15 and slow.fast_served == 0
        quick.store.flush_audit()
        slow.store.flush_audit()
        fast_audit = [_record(r) for r in quick.store.list_audit(limit=1000)]
        asgi_audit = [_record(r) for r in slow.store.list_audit(limit=1000)]
        assert fast_audit == asgi_audit and len(fast_audit) == sum(a for _, _, a in MATRIX)


def _record(r: Any) -> tuple[Any, ...]:
    return (r.uid, r.gid, r.action, r.target, r.status, r.error, r.denied)


#: Sends stdin's request on the socket named by argv[1] and prints every byte answered
#: (the request says Connection: close): a client of another uid, run as a subprocess.
CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read())
out = b""
while chunk := s.recv(65536):
    out += chunk
sys.stdout.buffer.write(out)
"""


SYSTEM_PYTHON = "/usr/bin/python3"


async def _as_user(uid: int, sock: Path, raw: bytes) -> Answer:
    proc = await asyncio.create_subprocess_exec(
        SYSTEM_PYTHON,  # the venv's may sit where the other user cannot read
        "-c",
        CLIENT,
        str(sock),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        user=uid,
    )
    out, _ = await proc.communicate(raw)
    assert proc.returncode == 0
    reader = asyncio.StreamReader()
    reader.feed_data(out)
    reader.feed_eof()
    return await _answer(reader)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user may reach (pytest's temp directories are root's own)."""
    path = Path(tempfile.mkdtemp(prefix="jobctl-fastpath-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


async def test_other_users_are_answered_alike(sqlite_template: Path, shared_dir: Path) -> None:
    """Another user's job is theirs (the owner from SO_PEERCRED), and a user the deny
    file names is refused by the gate (403, audited as denied), by both paths."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")  # CI runs the suite as root
    nobody = pwd.getpwnam("nobody").pw_uid
    (shared_dir / "jobctl.deny").write_text("nobody\n")
    refusing = Access(shared_dir / "jobctl.allow", shared_dir / "jobctl.deny")
    allowing = Access(shared_dir / "none.allow", shared_dir / "none.deny")
    raw = post(js(FAR), "Connection: close")
    for access, want in ((allowing, 201), (refusing, 403)):
        pair = [Daemon(shared_dir / f"{k}{want}", sqlite_template, k == "f", access) for k in "fa"]
        async with pair[0].running(), pair[1].running():
            for d in pair:
                d.path.chmod(0o666)
            got = [await _as_user(nobody, d.path, raw) for d in pair]
            assert got[0][0] == want
            assert _comparable(got[0]) == _comparable(got[1])
            if want == 201:
                assert got[0][2]["owner_uid"] == nobody
            assert pair[0].fast_served == 1
            for d in pair:
                d.store.flush_audit()
            records = [[_record(r) for r in d.store.list_audit()] for d in pair]
            assert records[0] == records[1] and records[0][0][0] == nobody
            assert records[0][0][-1] == (want == 403)


async def test_an_unexpected_failure_is_the_same_500(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit middleware's 500 for an error no layer expected: one JSON body quoting
    the request id, by both paths."""
    access = Access(tmp_path / "jobctl.allow", tmp_path / "jobctl.deny")
    broken = [Daemon(tmp_path / k, sqlite_template, k == "f", access) for k in "fa"]

    async def insert(specs: Any) -> Any:
        raise RuntimeError("the disk caught fire")

    for d in broken:
        monkeypatch.setattr(d.astore, "insert", insert)
    async with broken[0].running(), broken[1].running():
        got = [(await d.exchange(post(js(FAR)), 1))[0][0] for d in broken]
        assert got[0][0] == 500
        rid = next(v for k, v in got[0][1] if k == "x-request-id")
        assert rid in got[0][2]["error"]["message"]
        assert _comparable(got[0]) == _comparable(got[1])
        assert broken[0].fast_served == 1


async def test_each_answer_leaves_in_one_write(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Head and body in one system call, through either path and for FastAPI's routes
    (each write wakes the client; a head alone woke it for nothing)."""
    writes: list[bytes] = []
    real = os.write

    def write(fd: int, data: Any) -> int:
        writes.append(bytes(data))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)  # what the server's GilFreeWrites calls
    access = Access(tmp_path / "jobctl.allow", tmp_path / "jobctl.deny")
    for fast_path in (True, False):
        d = Daemon(tmp_path / str(fast_path), sqlite_template, fast_path, access)
        async with d.running():
            get = b"GET /v1/status HTTP/1.1\r\nHost: jobctl\r\n\r\n"
            for raw in (post(js(FAR)), post(b"{"), get):
                writes.clear()
                (answer,), _ = await d.exchange(raw, 1)
                assert len(writes) == 1, (fast_path, raw[:20], writes)
                assert writes[0].startswith(b"HTTP/1.1 ") and writes[0].endswith(
                    orjson.dumps(answer[2])
                )


async def test_shutdown_drains_an_enqueue_in_flight_alike(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown while an enqueue waits for its commit: the answer still comes (with
    ``connection: close``), then the connection closes, by both paths."""
    access = Access(tmp_path / "jobctl.allow", tmp_path / "jobctl.deny")
    answers = []
    for fast_path in (True, False):
        d = Daemon(tmp_path / str(fast_path), sqlite_template, fast_path, access)
        entered, release = asyncio.Event(), asyncio.Event()
        real = d.astore.insert

        async def held(
            specs: Any, real: Any = real, entered: Any = entered, release: Any = release
        ) -> Any:
            entered.set()
            await release.wait()
            return await real(specs)

        monkeypatch.setattr(d.astore, "insert", held)
        async with d.running():
            pending = asyncio.create_task(d.exchange(post(js(FAR)), 1))
            await entered.wait()
            d.server.should_exit = True  # uvicorn's shutdown begins at its next tick
            while not _told_to_close(d):
                await asyncio.sleep(0.01)  # until it has told the connection to close
            release.set()
            (answer,), closed = await pending
            assert closed and answer[0] == 201
            answers.append(_comparable(answer))
        assert d.fast_served == int(fast_path)
    assert answers[0] == answers[1] and ("connection", "close") in answers[0][1]


def _told_to_close(d: Daemon) -> bool:
    """Whether the server's shutdown has told its connection's cycle not to keep alive."""
    cycles = [getattr(c, "cycle", None) for c in d.server.server_state.connections]
    return bool(cycles) and all(c is not None and not c.keep_alive for c in cycles)


class FullDisk:
    """The disk guard's part (:class:`jobctl.api.admission.DiskFloor`) when the free space
    is below the floor: what makes the API refuse new work with 503 and Retry-After."""

    def check(self, now: Any = None) -> None:
        raise errors.StorageFull("free space below the floor", retry_after=2.5)

    def info(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        return None


async def test_a_refusal_for_now_carries_the_same_retry_after(
    tmp_path: Path, sqlite_template: Path
) -> None:
    access = Access(tmp_path / "jobctl.allow", tmp_path / "jobctl.deny")
    admission = Admission(disk=FullDisk())
    pair = [
        Daemon(tmp_path / k, sqlite_template, k == "f", access, admission=admission) for k in "fa"
    ]
    async with pair[0].running(), pair[1].running():
        got = [(await d.exchange(post(js(FAR)), 1))[0][0] for d in pair]
    assert got[0][0] == 503 and ("retry-after", "3") in got[0][1]
    assert got[0][2]["error"]["code"] == "storage_full"
    assert _comparable(got[0]) == _comparable(got[1]) and pair[0].fast_served == 1

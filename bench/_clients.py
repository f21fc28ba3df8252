"""Load-generating clients: :class:`UdsHttp`, a deliberately tiny HTTP/1.1 keep-alive
client over a Unix socket (pre-encoded requests; responses parsed only as far as status
and Content-Length, so a client costs a few microseconds of CPU per request and the
numbers measure the daemon, not httpx), and :func:`run_clients`, which starts N client
processes, releases them together and collects their results."""

import itertools
import json
import multiprocessing as mp
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any


class UdsHttp:
    """One keep-alive HTTP/1.1 connection to the daemon's Unix socket."""

    #: uvicorn closes a keep-alive connection after 5 s idle; reconnect before that
    #: instead of retrying a request (a retried POST could enqueue twice).
    IDLE_RECONNECT = 3.0

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path, self.timeout = str(path), timeout
        self._connect()

    def _connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)
        self.buf = b""
        self.used = time.monotonic()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if time.monotonic() - self.used > self.IDLE_RECONNECT:
            self.sock.close()
            self._connect()
        data = body or b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._recv()
        header, self.buf = self.buf[:end], self.buf[end + 4 :]
        status = int(header[9:12])
        length = None
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise RuntimeError("chunked responses are not supported by this bench client")
        if length is None:
            raise RuntimeError(f"response without Content-Length: {header[:200]!r}")
        while len(self.buf) < length:
            self._recv()
        payload, self.buf = self.buf[:length], self.buf[length:]
        self.used = time.monotonic()
        return status, payload

    def json(
        self, method: str, path: str, obj: Any = None, expect: Sequence[int] = (200, 201)
    ) -> Any:
        status, payload = self.request(
            method, path, None if obj is None else json.dumps(obj).encode()
        )
        if status not in expect:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {payload[:300]!r}")
        return json.loads(payload)

    def _recv(self) -> None:
        # 64 KiB, not 1 MiB: recv allocates its whole size first (82 vs 36 us of system
        # CPU per call measured against the shipped client), which the client's CPU,
        # competing with the daemon's on this machine, must not carry.
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


# -- client processes ---------------------------------------------------------------


def run_clients(
    target: Callable[..., None], per_client_args: Sequence[tuple[Any, ...]], timeout: float = 600.0
) -> list[dict[str, Any]]:
    """Run ``target(*args, barrier, queue)`` in one spawned process per args tuple.

    Each client connects and warms up, then waits on the barrier; all start together.
    Returns the dicts the clients put on the queue (one each).
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(per_client_args))
    out: Any = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(*a, barrier, out), daemon=True) for a in per_client_args
    ]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(out.get(timeout=timeout))
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r["error"] for r in results if r.get("error")]
    if errors:
        raise RuntimeError("client failed: " + errors[0])
    return results


def run_enqueue_clients(
    sock: str, mode: str, job: dict[str, Any], per: int, warmup: int, seconds: float, n: int
) -> list[dict[str, Any]]:
    """``n`` enqueue clients against the daemon on ``sock``: ``client`` calls the shipped
    ``jobctl.client`` one job at a time, any other mode sends ``per`` copies of ``job`` per
    request with the bench's lean client (bench_core workload 1, bench_pg's enqueue)."""
    if mode == "client":
        return run_clients(jobctl_client_enqueue_client, [(sock, job, warmup, seconds)] * n)
    body = json.dumps(job if per == 1 else [job] * per).encode()
    return run_clients(jobctl_enqueue_client, [(sock, body, per, warmup, seconds)] * n)


#: Where :func:`jobctl_enqueue_client` puts a key of each request's own.
KEY_MARK = b"@KEY@"


def keyed_bodies(body: bytes) -> Iterator[bytes]:
    """``body`` with :data:`KEY_MARK` replaced by a key no other request of the run has
    (this process's id and a count): keyed single-job enqueues, each a new job."""
    head, tail = body.split(KEY_MARK, 1)
    prefix = head + b"k%d-" % os.getpid()
    for n in itertools.count():
        yield prefix + b"%d" % n + tail


def jobctl_enqueue_client(
    sock: str, body: bytes, per_request: int, warmup: int, duration: float, barrier: Any, out: Any
) -> None:
    """POST ``body`` (one job or a batch of ``per_request``) until ``duration`` is over;
    a ``body`` holding ``@KEY@`` gets a key of its own per request (:func:`keyed_bodies`)."""
    try:
        c = UdsHttp(sock)
        bodies = keyed_bodies(body) if KEY_MARK in body else itertools.repeat(body)
        for _ in range(warmup):
            status, payload = c.request("POST", "/v1/jobs", next(bodies))
            if status != 201:
                raise RuntimeError(f"warm-up: HTTP {status}: {payload[:200]!r}")
        barrier.wait()
        t0 = time.time()
        end = t0 + duration
        n = errs = 0
        lat = []
        while True:
            s = time.time()
            if s >= end:
                break
            status, payload = c.request("POST", "/v1/jobs", next(bodies))
            lat.append(time.time() - s)
            if status == 201:
                n += per_request
            else:
                errs += 1
        out.put(
            {
                "jobs": n,
                "t0": t0,
                "last": time.time(),
                "lat": lat,
                "errors": errs,
                "warm_jobs": warmup * per_request,
            }
        )
        c.close()
    except BaseException as exc:  # reported to the parent, which raises
        out.put({"error": repr(exc)})


def jobctl_client_enqueue_client(
    sock: str, job: dict[str, Any], warmup: int, duration: float, barrier: Any, out: Any
) -> None:
    """Enqueue ``job`` through the shipped client (``jobctl.client.Client.enqueue``), one job
    per call, until ``duration`` is over: what a Python producer program pays."""
    try:
        from pathlib import Path

        from jobctl.client import Client

        c = Client(Path(sock))
        for _ in range(warmup):
            c.enqueue(job)
        barrier.wait()
        t0 = time.time()
        end = t0 + duration
        n = errs = 0
        lat = []
        cpu0 = time.process_time()
        while True:
            s = time.time()
            if s >= end:
                break
            try:
                c.enqueue(job)
                n += 1
            except Exception:
                errs += 1
            lat.append(time.time() - s)
        cpu = time.process_time() - cpu0
        out.put(
            {
                "jobs": n,
                "t0": t0,
                "last": time.time(),
                "lat": lat,
                "errors": errs,
                "warm_jobs": warmup,
                "client_cpu_us": 1e6 * cpu / max(1, n + errs),
            }
        )
        c.close()
    except BaseException as exc:  # reported to the parent, which raises
        out.put({"error": repr(exc)})


def huey_enqueue_client(db: str, warmup: int, duration: float, barrier: Any, out: Any) -> None:
    """Enqueue huey tasks (eta far in the future), one ``schedule()`` call per job."""
    try:
        import peer_huey

        _, tasks = peer_huey.make(db)
        eta = peer_huey.FAR_FUTURE
        for _ in range(warmup):
            tasks.noop.schedule(eta=eta)
        barrier.wait()
        t0 = time.time()
        end = t0 + duration
        n = errs = 0
        lat = []
        while True:
            s = time.time()
            if s >= end:
                break
            try:
                tasks.noop.schedule(eta=eta)
                n += 1
            except Exception:
                errs += 1
            lat.append(time.time() - s)
        out.put(
            {
                "jobs": n,
                "t0": t0,
                "last": time.time(),
                "lat": lat,
                "errors": errs,
                "warm_jobs": warmup,
            }
        )
    except BaseException as exc:
        out.put({"error": repr(exc)})


def huey_fill_client(
    db: str, kind: str, items: list[tuple[float, float]], barrier: Any, out: Any
) -> None:
    """Enqueue prepared huey tasks: ``items`` are (eta epoch seconds, arg) pairs."""
    try:
        import peer_huey

        _, tasks = peer_huey.make(db)
        barrier.wait()
        t0 = time.time()
        locked = 0
        for eta, arg in items:
            when = peer_huey.eta(eta)
            for _ in range(20):  # what a caller does when SQLite says "database is locked"
                try:
                    if kind == "true":
                        tasks.run_true.schedule(eta=when)
                    else:
                        tasks.lag.schedule(args=(arg,), eta=when)
                    break
                except Exception as exc:
                    if "locked" not in str(exc):
                        raise
                    locked += 1
            else:
                raise RuntimeError("huey enqueue still locked after 20 attempts")
        out.put({"t0": t0, "last": time.time(), "n": len(items), "locked": locked})
    except BaseException as exc:
        out.put({"error": repr(exc)})

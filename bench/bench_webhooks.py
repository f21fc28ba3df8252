#!/usr/bin/env python
"""Webhook delivery rate (issue 16, a first measurement): N http jobs due at one instant,
sent by the engine in-process (real SQLite store, timer, executor, httpx client) to a
receiver in another process on 127.0.0.1 that verifies every signature
(``jobctl.webhooks.verify``) and answers 204. Prints deliveries/s from the first claim to
the last finish, and what the receiver verified.

    python bench/bench_webhooks.py [--jobs 5000] [--concurrency 256]

Figures in docs/benchmarks.md ("Webhook deliveries"), not in its generated sections; the
200,000-job burst and the comparison with the process executor are later work.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from jobctl import webhooks
from jobctl.daemon import wire_engine
from jobctl.domain.clock import SystemClock
from jobctl.domain.http import HttpRequest
from jobctl.domain.models import JobSpec
from jobctl.domain.netguard import NetGuard, parse_networks
from jobctl.engine.executor import ExecutorConfig
from jobctl.engine.webhook import WebhookConfig
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore


def receiver(secret: str, port_out: mp.Queue, counts: mp.Queue) -> None:  # type: ignore[type-arg]
    """A keep-alive HTTP/1.1 receiver that verifies every request's signature."""
    seen = {"ok": 0, "bad": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")[1:]
                headers = dict(
                    (k.strip().lower(), v.strip())
                    for k, _, v in (x.partition(":") for x in lines)
                    if k
                )
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                try:
                    webhooks.verify(secret, headers, body)
                    seen["ok"] += 1
                except webhooks.WebhookVerificationError:
                    seen["bad"] += 1
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                if seen["ok"] + seen["bad"] >= TOTAL[0]:
                    counts.put(dict(seen))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


TOTAL = [0]


async def deliver(n: int, concurrency: int, url: str, secret: str, tmp: Path) -> float:
    clock = SystemClock()
    store = SqliteStore(tmp / "bench.db", clock, random.Random(1))
    store.secrets.create_secret(os.geteuid(), "default", secret)
    astore = AsyncStore(store, threads=8)
    hooks = WebhookConfig(NetGuard(parse_networks("127.0.0.0/8")), per_target=concurrency)
    cfg = ExecutorConfig(concurrency=concurrency, log_dir=tmp / "logs", webhooks=hooks)
    done = asyncio.Event()
    finished = [0]

    def on_finish(*_: object) -> None:
        finished[0] += 1
        if finished[0] >= n:
            done.set()

    parts = wire_engine(astore, clock, cfg, "bench:1:x", on_finish=on_finish)
    now = clock.now()
    req = HttpRequest("POST", url + "/hook", body='{"event": "tick"}')
    for i in range(0, n, 10_000):
        specs = [
            JobSpec(command=(), http=req, run_at=now, owner_uid=os.geteuid())
            for _ in range(min(10_000, n - i))
        ]
        store.insert(specs)
    start = time.perf_counter()
    timer = asyncio.get_running_loop().create_task(parts.timer.run())
    await done.wait()
    elapsed = time.perf_counter() - start
    parts.timer.stop()
    await timer
    await parts.executor.shutdown(0)
    astore.close()
    store.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=256)
    args = ap.parse_args()
    TOTAL[0] = args.jobs
    secret = webhooks.new_secret()
    ctx = mp.get_context("fork")
    port_q, counts_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=receiver, args=(secret, port_q, counts_q), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port_q.get(timeout=10)}"
    with tempfile.TemporaryDirectory() as tmp:
        elapsed = asyncio.run(deliver(args.jobs, args.concurrency, url, secret, Path(tmp)))
    counts = counts_q.get(timeout=30)
    proc.terminate()
    load = os.getloadavg()[0]
    print(f"{args.jobs} webhooks, concurrency {args.concurrency}: {elapsed:.2f} s, "
          f"{args.jobs / elapsed:,.0f} deliveries/s; receiver verified {counts['ok']}, "
          f"refused {counts['bad']}; load average {load:.2f}")  # fmt: skip
    sys.exit(0 if counts["bad"] == 0 else 1)


if __name__ == "__main__":
    main()

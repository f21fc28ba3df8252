#!/usr/bin/env python
"""Webhook bursts against the process executor, in one run (issue 16).

A burst of N http jobs all due at one instant is sent by the engine in-process (real
SQLite store, timer, executor, the webhook client of engine/httpclient.py, on uvloop as
in the daemon) to a receiver
in another process on 127.0.0.1 that verifies every delivery's signature
(``jobctl.webhooks.verify``) and answers 204. Then, in the same run, a burst of M ``true``
commands due at one instant goes through the same engine with the spawn helper (as the
daemon runs them). For each: the time from "due" to the last delivery (the receiver's
clock) or the last start, to the last finish committed, the rate, and the CPU time of
the engine's process (and of the receiver) per job. Prints PASS/MISS for the issue's
targets: >= 3,000 deliveries/s, and >= 2x the process executor's rate.

    python bench/bench_webhooks.py [--jobs 200000] [--process-jobs 20000]
                                   [--concurrency 128]

The process burst is smaller by default: at ~1,000 jobs/s a 200,000-command burst takes
minutes on the shared 2-core machine; both are rates of a burst due at once
(``--process-jobs 200000`` runs the same size). Figures: docs/benchmarks.md ("Webhook
deliveries"), with the load average this prints before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from jobctl import webhooks
from jobctl.daemon import wire_engine
from jobctl.domain.clock import SystemClock
from jobctl.domain.http import HttpRequest
from jobctl.domain.models import JobSpec
from jobctl.domain.netguard import NetGuard, parse_networks
from jobctl.engine.execconfig import ExecutorConfig
from jobctl.engine.spawnclient import SpawnHelper
from jobctl.engine.webhook import WebhookConfig
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

RATE_TARGET = 3000.0
RATIO_TARGET = 2.0
BATCH = 10_000


class _Receive(asyncio.Protocol):
    """A keep-alive HTTP/1.1 receiver that verifies every request's signature; cheap
    (a protocol, no streams), so it measures the sender, not itself."""

    def __init__(self, secret: str, seen: dict[str, float]) -> None:
        self.secret, self.seen = secret, seen
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")[1:]
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)
            }
            size = int(headers.get("content-length", "0"))
            if len(self.buf) < end + 4 + size:
                return
            body = bytes(self.buf[end + 4 : end + 4 + size])
            del self.buf[: end + 4 + size]
            try:
                webhooks.verify(self.secret, headers, body)
                self.seen["ok"] += 1
            except webhooks.WebhookVerificationError:
                self.seen["bad"] += 1
            self.seen["last"] = time.time()
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")


def receiver(secret: str, total: int, port_out: mp.Queue, counts: mp.Queue) -> None:  # type: ignore[type-arg]
    seen = {"ok": 0.0, "bad": 0.0, "last": 0.0}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _Receive(secret, seen), "127.0.0.1", 0, backlog=1024
        )
        port_out.put(server.sockets[0].getsockname()[1])
        while seen["ok"] + seen["bad"] < total:
            await asyncio.sleep(0.05)
        seen["cpu"] = _cpu()
        counts.put(seen)

    asyncio.run(main())


@dataclass
class Burst:
    jobs: int
    due_at: float  # wall clock: the timer starts, every job due
    due_to_last_finish: float  # due → the last finish committed
    cpu: float  # the engine's process, seconds

    @property
    def rate(self) -> float:
        return self.jobs / self.due_to_last_finish


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def burst(tmp: Path, specs: list[JobSpec], cfg: ExecutorConfig, secret: str) -> Burst:
    """Insert ``specs`` (all due now), then run the engine until the last one finished."""
    clock = SystemClock()
    store = SqliteStore(tmp / "bench.db", clock, random.Random(1))
    store.secrets.create_secret(os.geteuid(), "default", secret)
    astore = AsyncStore(store, threads=8)
    n = len(specs)
    done = asyncio.Event()
    finished = [0]

    def on_finish(*_: object) -> None:
        finished[0] += 1
        if finished[0] >= n:
            done.set()

    if cfg.helper is not None:
        cfg.helper.start(asyncio.get_running_loop())
    parts = wire_engine(astore, clock, cfg, "bench:1:x", on_finish=on_finish)
    for i in range(0, n, BATCH):
        store.insert(specs[i : i + BATCH])
    due, cpu0 = time.time(), _cpu()
    timer = asyncio.get_running_loop().create_task(parts.timer.run())
    await done.wait()
    elapsed, cpu = time.time() - due, _cpu() - cpu0
    parts.timer.stop()
    await timer
    await parts.executor.shutdown(0)
    if cfg.helper is not None:
        cfg.helper.close()
    astore.close()
    store.close()
    return Burst(n, due, elapsed, cpu)


def http_burst(args: argparse.Namespace, tmp: Path) -> tuple[Burst, dict[str, float]]:
    secret = webhooks.new_secret()
    ctx = mp.get_context("fork")
    port_q, counts_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=receiver, args=(secret, args.jobs, port_q, counts_q), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port_q.get(timeout=10)}/hook"
    hooks = WebhookConfig(NetGuard(parse_networks("127.0.0.0/8")), per_target=args.concurrency)
    cfg = ExecutorConfig(concurrency=args.concurrency, log_dir=tmp / "logs", webhooks=hooks)
    req = HttpRequest("POST", url, body='{"event": "tick"}')
    now = SystemClock().now()
    specs = [JobSpec(command=(), http=req, run_at=now, owner_uid=os.geteuid())] * args.jobs
    result = _run(burst(tmp / "http", specs, cfg, secret))
    counts = counts_q.get(timeout=60)
    proc.join(10)
    return result, counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--process-jobs", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=128)
    args = ap.parse_args()
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "http").mkdir()
        (tmp / "proc").mkdir()
        hook, counts = http_burst(args, tmp)
        last = counts["last"] - hook.due_at
        print(f"webhooks: {hook.jobs:,} due at once, concurrency {args.concurrency}: "
              f"{hook.rate:,.0f} deliveries/s; due -> last delivery {last:.1f} s, "
              f"-> last finish {hook.due_to_last_finish:.1f} s; "
              f"engine CPU {1e6 * hook.cpu / hook.jobs:.0f} us/delivery, receiver CPU "
              f"{1e6 * counts['cpu'] / hook.jobs:.0f} us; verified {counts['ok']:,.0f}, "
              f"refused {counts['bad']:,.0f}; load {os.getloadavg()[0]:.2f}")  # fmt: skip
        proc = process_burst(args, tmp / "proc")
        print(f"process executor: {proc.jobs:,} x true due at once: {proc.rate:,.0f} jobs/s; "
              f"due -> last finish {proc.due_to_last_finish:.1f} s; engine CPU "
              f"{1e6 * proc.cpu / proc.jobs:.0f} us/job; "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    ratio = hook.rate / proc.rate
    print(f"target >= {RATE_TARGET:,.0f} deliveries/s: {_verdict(hook.rate >= RATE_TARGET)} "
          f"({hook.rate:,.0f}/s)")  # fmt: skip
    print(f"target >= {RATIO_TARGET:g}x the process executor: {_verdict(ratio >= RATIO_TARGET)} "
          f"({ratio:.2f}x)")  # fmt: skip
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    sys.exit(0 if counts["bad"] == 0 and counts["ok"] == args.jobs else 1)


def process_burst(args: argparse.Namespace, tmp: Path) -> Burst:
    helper = SpawnHelper(0o077, None, "bench:1:x")
    cfg = ExecutorConfig(concurrency=args.concurrency, log_dir=tmp / "logs", helper=helper)
    now = SystemClock().now()
    specs = [JobSpec(command=("true",), run_at=now, owner_uid=os.geteuid())] * args.process_jobs
    return _run(burst(tmp, specs, cfg, webhooks.new_secret()))


def _run(coro: Coroutine[Any, Any, Burst]) -> Burst:
    """On uvloop, as the daemon runs (jobctl.daemon)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


if __name__ == "__main__":
    main()

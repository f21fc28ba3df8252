#!/usr/bin/env python
"""One "daemon" of ``bench_pg``'s scheduler ceiling: the engine in-process on PostgreSQL.

Run by ``bench_pg`` as ``python bench/pg_engine.py DSN OWNER SLOTS T0_ISO DUE_ISO``, once
per daemon, all on one database that already holds the jobs. It wires what the daemon
wires for dispatch (``PostgresStore`` + ``AsyncStore`` + ``engine.timer.Timer``), with
``bench_herd``'s instant executor in place of the process executor (each claim finished at
once through the batched ``AsyncStore.finish``), so the figure is the scheduler's ceiling:
claims and finishes, no ``fork``/``exec``. It prints ``ready``, waits for ``go`` on stdin
(every daemon moves its injected clock to the jobs' due time at that line), then for
``stop``, and prints one JSON line: what it started and finished, when, and its CPU.

Why a process per daemon: the figures per 1,000 jobs must count one daemon's CPU apart
from the others', as separate hosts would, and one GIL must not serialize them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_herd import InstantExecutor


class Instant(InstantExecutor):
    """The instant executor, keeping the ids it started and when its last finish landed."""

    def __init__(self, astore: Any, slots: int, owner: str) -> None:
        super().__init__(astore, slots, owner=owner)
        self.ids: list[int] = []
        self.last_finish_wall = 0.0

    def start(self, claim: Any) -> None:
        self.ids.append(claim.job.id)
        super().start(claim)

    async def _finish(self, claim: Any) -> None:
        await super()._finish(claim)
        self.last_finish_wall = time.time()


async def _stdin_line(loop: asyncio.AbstractEventLoop) -> str:
    line: str = await loop.run_in_executor(None, sys.stdin.readline)
    return line.strip()


async def _main(dsn: str, owner: str, slots: int, t0: dt.datetime, due: dt.datetime) -> None:
    from jobctl.domain.clock import FakeClock
    from jobctl.engine.executor import Executor
    from jobctl.engine.timer import Timer
    from jobctl.store.aio import AsyncStore
    from pg_work import open_store

    clock = FakeClock(t0)
    store = open_store(dsn, clock)
    astore = AsyncStore(store)
    ex = Instant(astore, slots, owner)
    ex.target = 1 << 62  # the parent says when every daemon together is done
    timer = Timer(astore, clock, cast(Executor, ex))
    ex.timer = timer
    loop = asyncio.get_running_loop()
    task = loop.create_task(timer.run())
    await asyncio.sleep(0.3)  # first tick: nothing due yet
    print("ready", flush=True)
    if await _stdin_line(loop) != "go":
        raise SystemExit("expected go")
    cpu0, t_go = time.process_time(), time.time()
    clock.set(due)
    timer.wake()
    await _stdin_line(loop)  # "stop"
    cpu = time.process_time() - cpu0
    timer.stop()
    await task
    out = {
        "owner": owner,
        "started": len(ex.ids),
        "ids": ex.ids,
        "finished": ex.finished,
        "fenced": ex.fenced,
        "failed": ex.failed,
        "claims": len(ex.claim_sizes),
        "ticks": timer.ticks,
        "t_go": t_go,
        "last_finish": ex.last_finish_wall,
        "cpu_s": cpu,
    }
    astore.close()
    store.close()
    print(json.dumps(out), flush=True)


def main() -> None:
    dsn, owner, slots, t0, due = sys.argv[1:6]
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop  # as the daemon runs
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(
            _main(
                dsn,
                owner,
                int(slots),
                dt.datetime.fromisoformat(t0),
                dt.datetime.fromisoformat(due),
            )
        )


if __name__ == "__main__":
    main()

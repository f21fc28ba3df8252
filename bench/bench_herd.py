#!/usr/bin/env python
"""Thundering-herd benchmarks: N jobs due in the same second (DLQ/queues issue).

Run ``python bench/bench_herd.py`` (full: 200,000 jobs; ~15 min on 2 cores, two thirds
of it the daemon draining workload a at a few hundred jobs/s) or ``--quick`` (20,000 jobs,
~2 min); ``--jobs N`` sets another size. It measures the jobctl installed in the running venv
(``pip install -e`` of this working tree). Workloads:

a. a real ``jobctl daemon --concurrency 64`` running ``true`` for each job: the jobs are
   enqueued with ``Client.enqueue_many`` (10,000 per request), all with one ``run_at`` a
   few seconds ahead; jobs/s and the time from that instant until the last one started.
b. the scheduler's own ceiling: the engine in-process (``SqliteStore`` + ``AsyncStore`` +
   ``engine.timer.Timer``) with the executor replaced by one that finishes each claim at
   once (``AsyncStore.finish``: batched ``store.finish_many``, then wakes the timer) and has 1,000
   slots; jobs/s and time until the last one started (target >= 10,000 jobs/s).
c. ``GET /v1/status`` (``Client.status()``) latency from another thread while (a)
   drains: p50/p99/max (target p99 <= 200 ms); and whether status tells the truth during
   the drain: counts always add up to N, and the queue's ``oldest_due_age`` grows with
   the real age of the backlog until it is gone.

Results are printed and written to docs/benchmarks.md between the bench_herd markers.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
from herd_report import (  # noqa: E402
    FULL,
    MARKS,
    QUEUE,
    QUICK,
    DaemonHerd,
    EngineHerd,
    Results,
    Sizes,
    Truth,
    report,
)

if TYPE_CHECKING:
    from jobctl.engine.executor import Executor

log = C.log
UTC = dt.UTC
FAR = "2099-01-01T00:00:00Z"


def iso_ms(epoch: float) -> str:
    ms = round(epoch * 1000)
    t = dt.datetime.fromtimestamp(ms // 1000, UTC) + dt.timedelta(milliseconds=ms % 1000)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# == c: the status watcher ===============================================================


class Sample(TypedDict):
    """One status answer: when it was asked, its latency, the counts and the herd queue's
    row of ``GET /v1/status`` (None before the queue exists)."""

    t: float
    t_mid: float
    lat: float
    counts: dict[str, int]
    queue: dict[str, Any] | None


class StatusWatcher:
    """Calls ``Client.status()`` in a loop from a thread and keeps every answer."""

    def __init__(self, sock: Path, every: float) -> None:
        from jobctl.client.client import Client

        self.client = Client(sock, timeout=60)
        self.every = every
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.time()
            s = time.perf_counter()
            try:
                st = self.client.status()
            except Exception as exc:
                self.errors.append(repr(exc))
                self._stop.wait(self.every)
                continue
            lat = time.perf_counter() - s
            q = next((x for x in st["queues"] if x["queue"] == QUEUE), None)
            self.samples.append(
                {"t": t0, "t_mid": t0 + lat / 2, "lat": lat, "counts": st["counts"], "queue": q}
            )
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()


def status_truth(samples: list[Sample], n: int, others: int, due_at: float, until: float) -> Truth:
    """Check the status answers taken between ``due_at`` and ``until`` (the drain).

    ``n`` jobs are in the herd queue, ``others`` in other queues (the probe)."""
    during = [s for s in samples if due_at <= s["t"] <= until]
    bad_counts = [s for s in samples if sum(s["counts"].values()) != n + others]
    # (sample, its herd-queue row) for the answers taken while jobs were still due
    backlog = [(s, q) for s in during if (q := s["queue"]) is not None and q["due"] > 0]
    # All jobs share one run_at, so while any is still due the true age of the oldest
    # overdue job is (the moment status looked) − run_at; the answer may be up to one
    # call's latency away from the midpoint we compare with.
    diffs = [
        (abs(q["oldest_due_age"] - (s["t_mid"] - due_at)), s["lat"] / 2)
        for s, q in backlog
        if q["oldest_due_age"] is not None
    ]
    errs = [max(0.0, d - half) for d, half in diffs]  # beyond what the call's latency explains
    missing_age = sum(1 for _, q in backlog if q["oldest_due_age"] is None)
    ages = [q["oldest_due_age"] for _, q in backlog if q["oldest_due_age"] is not None]
    dues = [q["due"] for _, q in backlog]
    monotonic_age = all(b >= a for a, b in itertools.pairwise(ages))
    monotonic_due = all(b <= a for a, b in itertools.pairwise(dues))
    q_sums_ok = all(
        s["queue"] is None
        or s["queue"]["waiting"]
        + s["queue"]["running"]
        + s["queue"]["succeeded"]
        + s["queue"]["dead"]
        + s["queue"]["cancelled"]
        == n
        for s in samples
    )
    return {
        "samples": len(samples),
        "during": len(during),
        "with_backlog": len(backlog),
        "counts_ok": not bad_counts and q_sums_ok,
        "bad_counts": len(bad_counts),
        "age_diff_max_ms": max((d for d, _ in diffs), default=float("nan")) * 1000,
        "age_err_max_ms": max(errs, default=float("nan")) * 1000,
        "missing_age": missing_age,
        "age_monotonic": monotonic_age,
        "due_monotonic": monotonic_due,
        "first_due": dues[0] if dues else None,
        "max_age": max(ages, default=None),
        "honest": bool(backlog)
        and not bad_counts
        and q_sums_ok
        and missing_age == 0
        and monotonic_age
        and max(errs, default=0) <= 1.0,
    }


# == a: real daemon running `true` =======================================================


def wa_daemon(tmp: Path, sz: Sizes) -> DaemonHerd:
    n = sz.jobs
    C.wait_quiet("the daemon herd")
    d = C.Daemon(tmp / "wa", concurrency=sz.concurrency)
    try:
        c = d.client()
        # All jobs get one run_at: far enough ahead for the enqueue to finish, close
        # enough not to waste the time budget. One probe request (a batch of jobs due in
        # 2099, in another queue) measures how fast this daemon takes batches.
        t = time.perf_counter()
        c.enqueue_many([{"command": ["true"], "queue": "probe", "run_at": FAR}] * sz.batch)
        probe_rate = sz.batch / (time.perf_counter() - t)
        due = time.time() + 3.0 + 1.2 * n / probe_rate
        body = [{"command": ["true"], "queue": QUEUE, "run_at": iso_ms(due)}] * sz.batch
        t = time.time()
        ids: list[int] = []
        for i in range(0, n, sz.batch):
            ids += [j["id"] for j in c.enqueue_many(body[: min(sz.batch, n - i)])]
        enqueue_s = time.time() - t
        late = time.time() > due
        log(
            f"a: enqueued {n:,} in {enqueue_s:.1f} s ({n / enqueue_s:,.0f}/s); due in "
            f"{due - time.time():.1f} s"
        )
        watcher = StatusWatcher(d.sock, sz.status_every)
        cpu0, t_cpu0 = C.cpu_seconds(d.pid), time.time()
        deadline = due + 1200
        while time.time() < deadline:
            time.sleep(0.25)
            if watcher.samples:
                counts = watcher.samples[-1]["counts"]
                if counts["succeeded"] + counts["dead"] + counts["cancelled"] >= n:
                    break
        t_done = time.time()
        time.sleep(3 * sz.status_every)
        watcher.stop()
        cores = (C.cpu_seconds(d.pid) - cpu0) / (time.time() - t_cpu0)
        rss = d.rss()
        c.close()
    finally:
        d.stop()
    con = sqlite3.connect(f"file:{d.db}?mode=ro", uri=True)
    first, last_start, last_finish, attempts, ok = con.execute(
        "SELECT min(started_at), max(started_at), max(finished_at), count(*), "
        "sum(outcome = 'succeeded') FROM attempts"
    ).fetchone()
    per_sec = con.execute(
        "SELECT started_at / 1000 AS s, count(*) FROM attempts GROUP BY s"
    ).fetchall()
    con.close()
    first, last_start, last_finish = first / 1000, last_start / 1000, last_finish / 1000
    lat = [s["lat"] for s in watcher.samples if due <= s["t"] <= last_finish]
    idle = [s["lat"] for s in watcher.samples if s["t"] < due - 0.2]
    out: DaemonHerd = {
        "n": n,
        "enqueue_s": enqueue_s,
        "enqueue_rate": n / enqueue_s,
        "late_enqueue": late,
        "first_start_after_due": first - due,
        "last_start_after_due": last_start - due,
        "last_finish_after_due": last_finish - due,
        "start_rate": n / (last_start - due),
        "rate": n / (last_finish - first),
        "peak_start_per_s": max((k for _, k in per_sec), default=0),
        "attempts": attempts,
        "succeeded": ok,
        "daemon_cores": cores,
        "rss_mb": rss["rss_mb"],
        "hwm_mb": rss["hwm_mb"],
        "wall_to_done": t_done - due,
        "verified": attempts == ok == n and len(set(ids)) == n,
        "status": {
            "n": len(lat),
            "p50_ms": C.pct(lat, 50) * 1000,
            "p99_ms": C.pct(lat, 99) * 1000,
            "max_ms": max(lat, default=float("nan")) * 1000,
            "errors": len(watcher.errors),
            "idle_n": len(idle),
            "idle_p50_ms": C.pct(idle, 50) * 1000,
        },
        "probe_rate": probe_rate,
        "margin_s": due - t,
        "truth": status_truth(watcher.samples, n, sz.batch, due, last_start),
    }
    log(
        f"a: daemon: last start {out['last_start_after_due']:.1f} s after due "
        f"({out['start_rate']:,.0f} starts/s), {out['rate']:,.0f} jobs/s first start → "
        f"last finish; daemon {cores:.2f} cores; verified {out['verified']}"
    )
    log(f"c: status during the drain: {out['status']}; truth {out['truth']}")
    return out


# == b: the engine in-process with an instant executor ===================================


class InstantExecutor:
    """What the Timer uses of an executor, finishing every claim at once.

    ``start`` hands the SUCCEEDED result to ``AsyncStore.finish`` (batched into
    ``store.finish_many``, as the real executor does) and, when it is committed, frees the
    slot and wakes the timer (as a real slot freeing does).
    """

    def __init__(self, astore: Any, slots: int, owner: str = "bench-herd:0:instant") -> None:
        from jobctl.domain.models import AttemptResult
        from jobctl.domain.states import Outcome
        from jobctl.engine.execconfig import ExecutorConfig

        self.astore = astore
        self.owner = owner
        self.config = ExecutorConfig(concurrency=slots, lease_ttl=300.0)
        self.ok = AttemptResult(Outcome.SUCCEEDED, 0)
        self.timer: Any = None
        self.inflight = self.started = self.finished = self.fenced = self.failed = 0
        self.last_start = self.first_start = 0.0
        self.claim_sizes: list[int] = []
        self._batch = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: set[tuple[int, int]] = set()
        self.done = asyncio.Event()
        self.target = 0

    @property
    def free_slots(self) -> int:
        # The timer asks right before claiming: a good moment to close the last batch.
        if self._batch:
            self.claim_sizes.append(self._batch)
            self._batch = 0
        return max(0, self.config.concurrency - self.inflight)

    def take(self, claim: Any) -> None:
        """The timer hands each claim here (the real executor may hold it for a slot):
        started at once, there is always a slot for a claim it asked for."""
        self.start(claim)

    def held(self) -> set[tuple[int, int]]:
        """Every (job id, generation) started and not finished (engine/indoubt.py asks)."""
        return set(self._held)

    def start(self, claim: Any) -> None:
        self._held.add((claim.job.id, claim.generation))
        now = time.perf_counter()
        self.first_start = self.first_start or now
        self.last_start = now
        self.inflight += 1
        self.started += 1
        self._batch += 1
        task = asyncio.get_running_loop().create_task(self._finish(claim))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, claim: Any) -> None:
        from jobctl.errors import LeaseLost

        try:
            # The real executor's path: batched with other finishes into one writer op
            # (store.finish_many), awaited from the loop, answered after the commit.
            await self.astore.finish(claim.job.id, claim.generation, self.ok)
        except LeaseLost:
            self.fenced += 1
        except Exception as exc:  # a finish that failed must be seen, not swallowed
            self.failed += 1
            if self.failed == 1:
                print(f"bench: a finish failed: {exc!r}", file=sys.stderr, flush=True)
            raise
        finally:
            self._held.discard((claim.job.id, claim.generation))
            self.inflight -= 1
            self.finished += 1
            if self.finished >= self.target:
                self.done.set()
            self.timer.wake()


async def _engine(path: Path, sz: Sizes) -> EngineHerd:
    from jobctl.domain.clock import FakeClock
    from jobctl.domain.models import JobSpec
    from jobctl.engine.timer import Timer
    from jobctl.store.aio import AsyncStore
    from jobctl.store.sqlite import SqliteStore

    n = sz.jobs
    t0 = dt.datetime.now(UTC).replace(microsecond=0)
    due = t0 + dt.timedelta(seconds=10)
    clock = FakeClock(t0)
    store = SqliteStore(path, clock)
    uid = os.geteuid()
    t = time.perf_counter()
    for i in range(0, n, sz.batch):
        store.insert(
            [
                JobSpec(command=("true",), run_at=due, owner_uid=uid, queue=QUEUE)
                for _ in range(min(sz.batch, n - i))
            ]
        )
    fill_s = time.perf_counter() - t
    log(f"b: inserted {n:,} jobs in-process in {fill_s:.1f} s ({n / fill_s:,.0f}/s)")
    astore = AsyncStore(store)
    ex = InstantExecutor(astore, sz.slots)
    ex.target = n
    timer = Timer(astore, clock, cast("Executor", ex))  # the part of one the Timer uses
    ex.timer = timer
    task = asyncio.get_running_loop().create_task(timer.run())
    await asyncio.sleep(0.5)  # first tick: nothing due, the timer sleeps until `due`
    assert ex.started == 0
    ticks0 = timer.ticks
    C.wait_quiet("the in-process herd")
    cpu0 = time.process_time()
    t_due = time.perf_counter()
    clock.set(due)  # 200,000 jobs are due now
    await asyncio.wait_for(ex.done.wait(), 1800)
    t_end = time.perf_counter()
    cpu = time.process_time() - cpu0
    timer.stop()
    await task
    stats = {q.queue: q for q in store.stats()}[QUEUE]
    astore.close()
    store.close()
    if ex._batch:
        ex.claim_sizes.append(ex._batch)
    sizes = ex.claim_sizes
    out: EngineHerd = {
        "n": n,
        "slots": sz.slots,
        "fill_rate": n / fill_s,
        "first_start_s": ex.first_start - t_due,
        "last_start_s": ex.last_start - t_due,
        "all_finished_s": t_end - t_due,
        "rate": n / (ex.last_start - t_due),
        "ticks": timer.ticks - ticks0,
        "claims": len(sizes),
        "claim_mean": sum(sizes) / max(1, len(sizes)),
        "claim_max": max(sizes, default=0),
        "cores": cpu / (t_end - t_due),
        "fenced": ex.fenced,
        "verified": ex.started == n and stats.succeeded == n and ex.fenced == 0,
    }
    log(
        f"b: in-process: last start {out['last_start_s']:.2f} s after due = "
        f"{out['rate']:,.0f} jobs/s ({out['ticks']} ticks, {out['claims']} claims of mean "
        f"{out['claim_mean']:.0f}); {out['cores']:.2f} cores; verified {out['verified']}"
    )
    return out


def wb_engine(tmp: Path, sz: Sizes) -> EngineHerd:
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop  # as the daemon runs
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_engine(tmp / "engine.db", sz))


# == report ==============================================================================


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 jobs (development)")
    ap.add_argument("--only", default="a,b", help="workloads: a (daemon, with c), b (engine)")
    ap.add_argument("--jobs", type=int, default=None, help="override the number of jobs")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument("--tmpdir", default=None, help="where temp dirs go (default: system temp)")
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="total time to wait for other processes to go quiet",
    )
    ap.add_argument(
        "--from-json",
        metavar="FILE",
        help="no benchmark: render the report of a saved bench/results/*.json",
    )
    args = ap.parse_args()
    if args.from_json:
        C.render_saved(args.from_json, report, Sizes, MARKS, write=not args.no_write)
        return 0
    sz = QUICK if args.quick else FULL
    if args.jobs:
        sz = Sizes(jobs=args.jobs)
    C.QUIET_BUDGET[0] = args.quiet_wait
    only = set(args.only.split(","))
    signal.signal(signal.SIGTERM, C.on_signal)
    signal.signal(signal.SIGINT, C.on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-herd-", dir=args.tmpdir))
    started = time.time()
    info = C.machine()
    log(f"bench_herd {'quick' if args.quick else 'full'} in {tmp}: {info}")
    R: Results = {}
    try:
        if "b" in only:
            R["b"] = C.attempt("b", wb_engine, tmp, sz)
        if "a" in only:
            R["a"] = C.attempt("a", wa_daemon, tmp, sz)
    finally:
        C.kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.time() - started
    C.conclude("bench_herd", R, sz, info, elapsed, report, MARKS, write=not args.no_write)
    log(f"done in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Schedule benchmarks of jobctl against the targets of the schedules issues (11, 18).

Run ``python bench/bench_schedules.py`` (full: 1,000,000 schedules, long on 2 cores) or
``--quick`` (100,000 schedules). It measures the jobctl installed in the running venv
(``pip install -e`` of this working tree): the store is used in-process and the daemon
and the CLI are the venv's ``jobctl`` console script. Workloads:

a. materializing the next occurrence of N schedules that are all due at one instant:
   N schedules (a mix of cron expressions and zones) are created through
   ``create_schedules`` of the store (lists of 1,000) with a ``FakeClock``; the clock is
   then moved to the instant they are all due and ``store.materialize(1000)`` is called
   until nothing is left: schedules/s (target >= 20,000/s). The same schedules (a copy of
   the file, their occurrence already due in real time) are then given to a real
   ``jobctl daemon``: time from spawn until ``GET /v1/status`` counts N jobs, while
   ``status`` and ``GET /v1/schedules?limit=50`` are timed (targets <= 50 ms each).
r. the reads on that daemon once it holds N schedules and N due jobs (issue 18):
   ``status``, ``schedules list --limit 50`` and ``schedules show`` through the API
   (medians) and as CLI commands (wall time), and a walk of every schedule page (pages of
   1,000, following ``next_cursor``); daemon RSS before and after the walk and its peak
   (target <= 150 MB).
b. RSS of a real daemon on a database holding N schedules that are not yet due, after
   ``event=ready`` and one status call (target <= 150 MB).
c. wall time of ``jobctl next "0 6 * * *" --tz Asia/Tokyo`` including interpreter
   start-up, median of 10 runs (target <= 300 ms), with bytecode available as after a
   ``pip install``: jobctl's package is byte-compiled first (``compileall``) and the runs
   do not inherit ``PYTHONDONTWRITEBYTECODE``.
d. batch creation through the API: N schedules sent to a real daemon as lists of 1,000
   (``POST /v1/schedules``) through the shipped client from two connections: schedules/s
   (target >= 20,000/s) and the daemon's CPU time per schedule.

``--db postgresql://USER@HOST/DB`` runs the same workloads on PostgreSQL (the in-process
store is a ``PostgresStore``, the daemons get ``--db`` URLs) in databases of the bench's
own on that server (``jobctl_bench_sched*``, dropped at the end; see
``schedules_backend.py``); the default is SQLite files in a temp directory.

Results are printed and written to docs/benchmarks.md between the bench_schedules
markers (``bench_schedules_pg`` for PostgreSQL). The daemon, quiet-wait and report
helpers live in ``_common.py``; workload r in ``schedules_reads.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
from _common import (  # noqa: E402
    JOBCTL_BIN,
    QUIET_BUDGET,
    Daemon,
    clean_env,
    kill_all,
    log,
    log_ts,
    machine,
    on_signal,
    wait_quiet,
)
from schedules_backend import Backend, is_url  # noqa: E402
from schedules_reads import wr_reads  # noqa: E402
from schedules_report import (  # noqa: E402
    FULL,
    QUICK,
    ApiCreate,
    InDaemon,
    InProcess,
    ListWalk,
    NextResult,
    Results,
    RssResult,
    RssSample,
    Sizes,
    marks_for,
    report,
)
from schedules_specs import (  # noqa: E402
    QUEUE,
    api_body,
    create_all,
    floor_minute,
    make_specs,
    walk_schedules,
)

UTC = dt.UTC
# == workload a: materialize =============================================================


def wa_inprocess(be: Backend, sz: Sizes) -> InProcess:
    from jobctl.domain.clock import FakeClock
    from jobctl.domain.dispatch import QueuePolicy

    n = sz.schedules
    # Occurrences in the 5 minutes up to the last whole minute of real time, so that the
    # daemon run below (on a copy) finds them due as well.
    t1 = floor_minute(dt.datetime.now(UTC))
    t0 = t1 - dt.timedelta(minutes=5)
    specs = make_specs(n, t0, 5)
    distinct = len({(s.timing.tz, s.timing.cron) for s in specs})
    clock = FakeClock(t0)
    be.fresh("sched")
    store = be.store("sched", clock)
    wait_quiet("creating schedules")
    log(f"a: creating {n:,} schedules ({distinct} distinct zone+cron pairs)")
    create_rate = create_all(store, specs)
    store.set_queue(QueuePolicy(QUEUE, paused=True))  # the daemon copy must not run them
    nexts = [s.next_run_at for s in walk_schedules(store)]
    assert len(nexts) == n and all(t0 < t <= t1 for t in nexts), "schedules not in window"
    store.close()
    be.copy("sched", "daemon")
    log(f"a: created at {create_rate:,.0f}/s; materializing in-process")

    store = be.store("sched", clock)
    clock.set(t1)
    wait_quiet("in-process materialize")
    calls: list[float] = []
    created = 0
    t = time.perf_counter()
    while True:
        c = time.perf_counter()
        m = store.materialize(sz.batch)
        calls.append(time.perf_counter() - c)
        created += len(m.created)
        if m.schedules == 0:
            break
    secs = time.perf_counter() - t
    st = {q.queue: q for q in store.stats()}[QUEUE]
    left = sum(1 for s in walk_schedules(store) if s.next_run_at <= t1)
    store.close()
    out: InProcess = {
        "n": n,
        "distinct": distinct,
        "create_rate": create_rate,
        "seconds": secs,
        "rate": n / secs,
        "created": created,
        "calls": len(calls),
        "call_p50_ms": C.pct(calls, 50) * 1000,
        "call_max_ms": max(calls) * 1000,
        "verified": created == n and st.scheduled == n and left == 0,
    }
    log(
        f"a: in-process {out['rate']:,.0f} schedules/s ({secs:.2f} s, {len(calls)} calls of "
        f"{sz.batch}, p50 {out['call_p50_ms']:.0f} ms; {created:,} jobs; verified "
        f"{out['verified']})"
    )
    return out


def wa_daemon(be: Backend, sz: Sizes) -> InDaemon:
    """A daemon started on the copy: every schedule's occurrence is due at start-up. While
    it materializes, ``status`` and a first page of 50 schedules are timed in turn; then
    workload r reads the daemon that holds N schedules and N due jobs."""
    n = sz.schedules
    wait_quiet("daemon materialize")
    d = Daemon(be.tmp / "wa-daemon", db=be.daemon_db("daemon"))
    try:
        c = d.client()
        polls: list[float] = []
        lists: list[float] = []
        hwm_during = 0.0
        deadline = time.time() + 3600
        while True:
            t = time.perf_counter()
            counts = c.status()["counts"]
            polls.append(time.perf_counter() - t)
            t = time.perf_counter()
            c.page("/v1/schedules", {"limit": 50})
            lists.append(time.perf_counter() - t)
            hwm_during = max(hwm_during, d.rss()["rss_mb"])
            if sum(counts.values()) >= n or time.time() > deadline:
                break
            time.sleep(0.05)
        t_done = time.time()
        rss = d.rss()
        reads = wr_reads(d, c, n)
        c.close()
        cli = subprocess.run(
            [JOBCTL_BIN, "status", "--json", "--socket", str(d.sock)],
            capture_output=True,
            check=True,
            env=clean_env(d.dir),
        )
        final = json.loads(cli.stdout)
    finally:
        d.stop()
    stamps = [
        log_ts(line) for line in d.log_path.read_bytes().splitlines() if b"event=enqueued" in line
    ]
    first, last = min(filter(None, stamps)), max(filter(None, stamps))
    jobs = sum(final["counts"].values())
    spawn_to_all = t_done - d.t_spawn
    out: InDaemon = {
        "spawn_to_ready": d.t_ready - d.t_spawn,
        "spawn_to_all": spawn_to_all,
        "ready_to_all": t_done - d.t_ready,
        "log_first_to_last": last - first,
        "log_rate": len(stamps) / max(1e-3, last - first),
        "logged": len(stamps),
        "jobs": jobs,
        "materializer": final.get("materializer"),
        "status_p50_ms": C.pct(polls, 50) * 1000,
        "status_max_ms": max(polls) * 1000,
        "list50_p50_ms": C.pct(lists, 50) * 1000,
        "list50_max_ms": max(lists) * 1000,
        "polls": len(polls),
        "rss_during_max_mb": hwm_during,
        "rss_after_mb": rss["rss_mb"],
        "hwm_mb": rss["hwm_mb"],
        "reads": reads,
        "verified": jobs == n and final["counts"]["scheduled"] == n and len(stamps) == n,
        "rate": n / spawn_to_all,
    }
    log(
        f"a: daemon: {n:,} jobs {out['spawn_to_all']:.1f} s after spawn (ready after "
        f"{out['spawn_to_ready']:.1f} s; log first→last enqueued {out['log_first_to_last']:.1f}"
        f" s = {out['log_rate']:,.0f}/s; during it status p50 {out['status_p50_ms']:.0f} ms, "
        f"max {out['status_max_ms']:.0f} ms, list --limit 50 p50 {out['list50_p50_ms']:.0f} "
        f"ms, max {out['list50_max_ms']:.0f} ms); verified {out['verified']}"
    )
    return out


# == workload d: batch creation through the API ===========================================


def wd_api_create(be: Backend, sz: Sizes) -> ApiCreate:
    """N schedules (each its own command, as an import's would be) sent to an empty daemon
    as lists of 1,000 through the shipped client's ``create_schedules``, from two
    threads with a client each: schedules/s, and the daemon's CPU time per schedule
    (what the load of other processes on the machine changes least)."""
    n = sz.schedules
    t0 = floor_minute(dt.datetime.now(UTC)) + dt.timedelta(days=1)
    bodies = [api_body(s) for s in make_specs(n, t0, 5, seed=13)]
    for i, body in enumerate(bodies):
        body["job"]["command"] = ["/usr/local/bin/report", f"--part={i}"]
    lists = [bodies[i : i + 1000] for i in range(0, n, 1000)]
    wait_quiet("API batch creation")
    # over the default quota of 100,000 live schedules a user: none for this daemon
    be.fresh("api")
    d = Daemon(be.tmp / "wd", db=be.daemon_db("api"), env={"JOBCTL_QUOTA_SCHEDULES": "0"})
    try:
        clients = [d.client() for _ in range(2)]
        created = [0, 0]

        def send(k: int) -> None:
            for chunk in lists[k::2]:
                got = clients[k].create_schedules(chunk)
                created[k] += sum(1 for a in got if a.get("created"))

        cpu0, t = C.cpu_seconds(d.pid), time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(send, range(2)))
        secs, cpu = time.perf_counter() - t, C.cpu_seconds(d.pid) - cpu0
        total = clients[0].status()["schedules"]["total"]
        for c in clients:
            c.close()
        rss = d.rss()
    finally:
        d.stop()
    out: ApiCreate = {
        "seconds": secs,
        "rate": n / secs,
        "cpu_us": cpu / n * 1e6,
        "created": sum(created),
        "requests": len(lists),
        "rss_mb": rss["rss_mb"],
        "hwm_mb": rss["hwm_mb"],
        "verified": total == n and sum(created) == n,
    }
    log(
        f"d: {n:,} schedules through the API in {secs:.1f} s = {out['rate']:,.0f}/s "
        f"({len(lists)} lists of 1,000 over 2 connections; daemon CPU {out['cpu_us']:.0f} "
        f"µs a schedule); verified {out['verified']}"
    )
    return out


# == workload b: RSS =====================================================================


def wb_rss(be: Backend, sz: Sizes) -> RssResult:
    from jobctl.domain.clock import FakeClock

    n = sz.schedules
    # First occurrences tomorrow: nothing falls due while the daemon is measured.
    t0 = floor_minute(dt.datetime.now(UTC)) + dt.timedelta(days=1)
    be.fresh("rss")
    store = be.store("rss", FakeClock(t0))
    log(f"b: creating {n:,} schedules due tomorrow")
    rate = create_all(store, make_specs(n, t0, 5, seed=11))
    store.close()
    db_mb = be.size_mb("rss")
    be.fresh("empty")
    empty, _ = _rss_of(be.tmp, "empty", be.daemon_db("empty"))
    full, walk = _rss_of(be.tmp, "full", be.daemon_db("rss"), walk=True)
    if walk is None:
        raise RuntimeError("the full daemon's schedule walk did not run")
    return {
        "create_rate": rate,
        "db_mb": db_mb,
        "empty": empty,
        "full": full,
        "list": walk,
        "verified": full["schedules"] == n,
    }


def _rss_of(
    tmp: Path, label: str, db: Path | str, walk: bool = False
) -> tuple[RssSample, ListWalk | None]:
    """A daemon's RSS after ready and one status call; on the full database, also what
    walking every schedule page costs it (workload r again)."""
    wait_quiet(f"daemon RSS ({label})")
    d = Daemon(tmp / f"wb-{label}", db=db)
    walked: ListWalk | None = None
    try:
        c = d.client()
        t = time.perf_counter()
        st = c.status()
        status_ms = (time.perf_counter() - t) * 1000
        time.sleep(0.5)
        sample: RssSample = {
            **d.rss(),
            "status_ms": status_ms,
            "ready_s": d.t_ready - d.t_spawn,
            "schedules": st["schedules"]["total"],
        }
        if walk:
            t = time.perf_counter()
            listed = sum(len(p["items"]) for p in c.pages("/v1/schedules", {"limit": 1000}))
            walked = {**d.rss(), "seconds": time.perf_counter() - t, "listed": listed}
        c.close()
    finally:
        d.stop()
    log(f"b: daemon ({label}): {sample}")
    return sample, walked


# == workload c: jobctl next =============================================================


def wc_next(be: Backend, sz: Sizes) -> NextResult:
    import jobctl

    cmd = [JOBCTL_BIN, "next", "0 6 * * *", "--tz", "Asia/Tokyo"]
    # As installed by pip: byte-compiled, so start-up does not recompile jobctl's modules
    # (an environment with PYTHONDONTWRITEBYTECODE=1 and no __pycache__ recompiles every
    # module on every run, which is not what users see).
    package = Path(jobctl.__file__).resolve().parent
    # (not check=True: a module that does not compile is reported and not timed here)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=False)
    env = clean_env(be.tmp)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(cmd, capture_output=True, check=True, env=env)  # warm the page cache
    wait_quiet("jobctl next")
    times = []
    out_text = ""
    for _ in range(sz.next_runs):
        t = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, check=True, env=env)
        times.append((time.perf_counter() - t) * 1000)
        out_text = done.stdout.decode()
    # the same through `python -X importtime` would show what start-up imports; here only
    # the split between interpreter start and the command:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    bare_ms = (time.perf_counter() - t) * 1000
    res: NextResult = {
        "median_ms": C.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "runs_ms": times,
        "python_bare_ms": bare_ms,
        "bytecode": True,
        "verified": "21:00" in out_text or "21:00:00" in out_text,
    }
    log(
        f"c: jobctl next median {res['median_ms']:.0f} ms (min {res['min_ms']:.0f}, max "
        f"{res['max_ms']:.0f}; bare python {bare_ms:.0f} ms; jobctl byte-compiled first)"
    )
    return res


# == main ================================================================================


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 schedules")
    ap.add_argument("--only", default="a,b,c,d", help="workloads to run, e.g. a,c")
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon part of a")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument("--tmpdir", default=None, help="where temp dirs go (default: system temp)")
    ap.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="postgresql://… server to run on, in databases of the bench's own "
        "(jobctl_bench_sched*, dropped at the end); default: SQLite files in the temp dir",
    )
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
    return ap.parse_args()


def run_workloads(args: argparse.Namespace, be: Backend, sz: Sizes) -> Results:
    """Each workload asked for; one that fails is recorded and the others still run."""
    only = set(args.only.split(","))
    R: Results = {}
    if "a" in only:
        R["a"] = C.attempt("a", wa_inprocess, be, sz)
        if not args.no_daemon and "error" not in R["a"]:
            R["a_daemon"] = C.attempt("a_daemon", wa_daemon, be, sz)
    if "b" in only:
        R["b"] = C.attempt("b", wb_rss, be, sz)
    if "c" in only:
        R["c"] = C.attempt("c", wc_next, be, sz)
    if "d" in only:
        R["d"] = C.attempt("d", wd_api_create, be, sz)
    return R


def main() -> int:
    args = parse_args()
    if args.from_json:
        saved = Sizes(**json.loads(Path(args.from_json).read_text())["sizes"])
        C.render_saved(args.from_json, report, Sizes, marks_for(saved), write=not args.no_write)
        return 0
    if args.db is not None and not is_url(args.db):
        raise SystemExit("bench_schedules: --db takes a postgresql:// URL (SQLite is the default)")
    sz = dataclasses.replace(
        QUICK if args.quick else FULL, backend="postgresql" if args.db else "sqlite"
    )
    QUIET_BUDGET[0] = args.quiet_wait
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-sched-", dir=args.tmpdir))
    started = time.time()
    be = Backend(tmp, args.db)
    info = machine()
    if (server := be.server()) is not None:
        info["postgres"] = server
    log(f"bench_schedules {'quick' if args.quick else 'full'} on {be.name} in {tmp}: {info}")
    try:
        R = run_workloads(args, be, sz)
    finally:
        kill_all()
        be.close()
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.time() - started
    marks = marks_for(sz)
    C.conclude("bench_schedules", R, sz, info, elapsed, report, marks, write=not args.no_write)
    log(f"done in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

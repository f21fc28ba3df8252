#!/usr/bin/env python
"""Schedule benchmarks of jobctl against the targets of the schedules issues (11, 18).

Run ``python bench/bench_schedules.py`` (full: 1,000,000 schedules, long on 2 cores) or
``--quick`` (100,000 schedules). It measures the jobctl installed in the running venv
(``pip install -e`` of this working tree): the store is used in-process and the daemon
and the CLI are the venv's ``jobctl`` console script. Workloads:

a. materializing the next occurrence of N schedules that are all due at one instant:
   N schedules (a mix of cron expressions and zones) are created through
   ``SqliteStore.create_schedules`` (lists of 1,000) with a ``FakeClock``; the clock is
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

Results are printed and written to docs/benchmarks.md between the bench_schedules
markers. The daemon, quiet-wait and report helpers live in ``_common.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import _common as C  # noqa: E402
from _common import (  # noqa: E402
    JOBCTL_BIN,
    QUIET_BUDGET,
    Daemon,
    clean_env,
    fmt,
    header,
    kill_all,
    log,
    log_ts,
    machine,
    on_signal,
    verdict,
    wait_quiet,
)

UTC = dt.UTC
MARKS = ("<!-- bench_schedules:start -->", "<!-- bench_schedules:end -->")

TARGETS = {
    "materialize": 20_000.0,
    "rss_mb": 150.0,
    "next_ms": 300.0,
    "read_ms": 50.0,
    "create": 20_000.0,
}


@dataclass(frozen=True)
class Sizes:
    schedules: int
    next_runs: int
    batch: int = 1000  # materialize(limit)


FULL = Sizes(schedules=1_000_000, next_runs=10)
QUICK = Sizes(schedules=100_000, next_runs=5)


# == the schedules =======================================================================

ZONES = (
    "UTC",
    "Asia/Tokyo",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Asia/Kolkata",
    "America/Los_Angeles",
    "Asia/Kathmandu",
    "America/Sao_Paulo",
    "Pacific/Auckland",
    "Europe/London",
    "Africa/Cairo",
)
QUEUE = "sched-bench"


def cron_for(local: dt.datetime, kind: int) -> str:
    """A cron expression of ``kind`` that fires at the wall time ``local`` (whole minutes)."""
    m, h, d, mon = local.minute, local.hour, local.day, local.month
    dow = local.isoweekday() % 7
    exprs = [
        f"{m} * * * *",  # hourly
        f"{m} {h} * * *",  # daily
        f"{m} {h} * * {'1-5' if 1 <= dow <= 5 else '0,6'}",  # weekdays / weekends
        f"{m} {h} * * {dow}",  # weekly
        f"{m} {h} {d} * *",  # monthly
        f"{m} {h},{(h + 12) % 24} * * *",  # twice a day
        f"{m} {h} {d} {mon} *",  # yearly
        f"{m} {h} 1-{max(d, 15)} * *",  # first half of the month
    ]
    if m % 15 == 0:
        exprs += ["*/15 * * * *", f"{m} */{3 if h % 3 == 0 else 1} * * *"]
    if m % 5 == 0:
        exprs += ["*/5 * * * *"]
    return exprs[kind % len(exprs)]


def make_specs(n: int, t0: dt.datetime, window_min: int, seed: int = 7) -> list[Any]:
    """``n`` schedules whose first occurrence after ``t0`` is in (t0, t0 + window_min]
    and whose second is after that, over a mix of zones and cron shapes."""
    from jobctl.domain.models import JobTemplate
    from jobctl.domain.schedule import Policy, ScheduleSpec, Timing

    rng = random.Random(seed)
    uid = os.geteuid()
    template = JobTemplate(("true",), queue=QUEUE)
    zones = {z: ZoneInfo(z) for z in ZONES}
    specs = []
    for _ in range(n):
        zone = rng.choice(ZONES)
        at = t0 + dt.timedelta(minutes=rng.randint(1, window_min))
        cron = cron_for(at.astimezone(zones[zone]), rng.randrange(12))
        specs.append(ScheduleSpec(Timing(zone, cron=cron), Policy(), template, uid))
    return specs


def create_all(store: Any, specs: list[Any], chunk: int = 1000) -> float:
    """Create the schedules through ``create_schedules``, lists of ``chunk`` (one
    transaction each, as ``POST /v1/schedules`` with a list does). Returns schedules/s."""
    t = time.perf_counter()
    for start in range(0, len(specs), chunk):
        got = store.create_schedules(specs[start : start + chunk])
        bad = [a for a in got if isinstance(a, Exception)]
        if bad:
            raise RuntimeError(f"create_schedules refused {len(bad)}: {bad[0]}")
        done = start + len(got)
        if done % 100_000 == 0:
            log(f"  created {done:,} schedules ({done / (time.perf_counter() - t):,.0f}/s)")
    return len(specs) / (time.perf_counter() - t)


def api_body(spec: Any) -> dict[str, Any]:
    """The ``POST /v1/schedules`` object of a spec made by :func:`make_specs`."""
    return {
        "cron": spec.timing.cron,
        "tz": spec.timing.tz,
        "job": {"command": list(spec.template.command), "queue": QUEUE, "cwd": "/"},
    }


def copy_db(src: Path, dst: Path) -> None:
    """Copy a closed SQLite database (its WAL was checkpointed when it closed)."""
    for suffix in ("", "-wal"):
        if Path(str(src) + suffix).exists():
            shutil.copyfile(str(src) + suffix, str(dst) + suffix)


def floor_minute(t: dt.datetime) -> dt.datetime:
    return t.replace(second=0, microsecond=0)


# == workload a: materialize =============================================================


def wa_inprocess(tmp: Path, sz: Sizes) -> dict[str, Any]:
    from jobctl.domain.clock import FakeClock
    from jobctl.domain.dispatch import QueuePolicy
    from jobctl.store.sqlite import SqliteStore

    n = sz.schedules
    # Occurrences in the 5 minutes up to the last whole minute of real time, so that the
    # daemon run below (on a copy) finds them due as well.
    t1 = floor_minute(dt.datetime.now(UTC))
    t0 = t1 - dt.timedelta(minutes=5)
    specs = make_specs(n, t0, 5)
    distinct = len({(s.timing.tz, s.timing.cron) for s in specs})
    path = tmp / "sched.db"
    clock = FakeClock(t0)
    store = SqliteStore(path, clock)
    wait_quiet("creating schedules")
    log(f"a: creating {n:,} schedules ({distinct} distinct zone+cron pairs)")
    create_rate = create_all(store, specs)
    store.set_queue(QueuePolicy(QUEUE, paused=True))  # the daemon copy must not run them
    nexts = [s.next_run_at for s in walk_schedules(store)]
    assert len(nexts) == n and all(t0 < t <= t1 for t in nexts), "schedules not in window"
    store.close()
    copy_db(path, tmp / "daemon.db")
    log(f"a: created at {create_rate:,.0f}/s; materializing in-process")

    store = SqliteStore(path, clock)
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
    out = {
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


def walk_schedules(store: Any, page: int = 10_000) -> Any:
    """Every schedule of the store, a keyset page at a time."""
    after = None
    while got := store.list_schedules(False, page, after):
        yield from got
        after = got[-1].id


def wa_daemon(tmp: Path, sz: Sizes) -> dict[str, Any]:
    """A daemon started on the copy: every schedule's occurrence is due at start-up. While
    it materializes, ``status`` and a first page of 50 schedules are timed in turn; then
    workload r reads the daemon that holds N schedules and N due jobs."""
    n = sz.schedules
    wait_quiet("daemon materialize")
    d = Daemon(tmp / "wa-daemon", db=tmp / "daemon.db")
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
    out = {
        "spawn_to_ready": d.t_ready - d.t_spawn,
        "spawn_to_all": t_done - d.t_spawn,
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
    }
    out["rate"] = n / out["spawn_to_all"]
    log(
        f"a: daemon: {n:,} jobs {out['spawn_to_all']:.1f} s after spawn (ready after "
        f"{out['spawn_to_ready']:.1f} s; log first→last enqueued {out['log_first_to_last']:.1f}"
        f" s = {out['log_rate']:,.0f}/s; during it status p50 {out['status_p50_ms']:.0f} ms, "
        f"max {out['status_max_ms']:.0f} ms, list --limit 50 p50 {out['list50_p50_ms']:.0f} "
        f"ms, max {out['list50_max_ms']:.0f} ms); verified {out['verified']}"
    )
    return out


def _timed(fn: Any, times: int) -> list[float]:
    out = []
    for _ in range(times):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _cli_ms(d: Daemon, *argv: str, runs: int = 5) -> float:
    """Median wall time of ``jobctl ARGV --socket S`` (interpreter start-up included)."""
    cmd = [JOBCTL_BIN, *argv, "--socket", str(d.sock)]
    env = clean_env(d.dir)
    return C.median(
        _timed(lambda: subprocess.run(cmd, capture_output=True, check=True, env=env), runs)
    )


def wr_reads(d: Daemon, c: Any, n: int) -> dict[str, Any]:
    """Workload r: the reads of a daemon holding ``n`` schedules and ``n`` due jobs."""
    wait_quiet("reads")
    first = c.page("/v1/schedules", {"limit": 50})
    some = [s["id"] for s in first["items"]]
    status = _timed(c.status, 30)
    list50 = _timed(lambda: c.page("/v1/schedules", {"limit": 50}), 30)
    show = _timed(lambda: c.schedule(random.choice(some)), 30)
    out: dict[str, Any] = {
        "status_ms": C.median(status),
        "status_max_ms": max(status),
        "list50_ms": C.median(list50),
        "list50_max_ms": max(list50),
        "show_ms": C.median(show),
        "show_max_ms": max(show),
        "cli_status_ms": _cli_ms(d, "status"),
        "cli_list50_ms": _cli_ms(d, "schedules", "list", "--limit", "50"),
        "cli_show_ms": _cli_ms(d, "schedules", "show", some[0]),
        "rss_before_walk_mb": d.rss()["rss_mb"],
    }
    t = time.perf_counter()
    walked = pages = 0
    peak = 0.0
    for got in c.pages("/v1/schedules", {"limit": 1000}):
        walked += len(got["items"])
        pages += 1
        if pages % 50 == 0:
            peak = max(peak, d.rss()["rss_mb"])
    out |= {
        "walk_s": time.perf_counter() - t,
        "walked": walked,
        "pages": pages,
        "rss_walk_max_mb": max(peak, d.rss()["rss_mb"]),
        "rss_after_walk_mb": d.rss()["rss_mb"],
        "hwm_mb": d.rss()["hwm_mb"],
        "verified": walked == n,
    }
    log(
        f"r: status {out['status_ms']:.1f} ms, list --limit 50 {out['list50_ms']:.1f} ms, "
        f"show {out['show_ms']:.1f} ms (API medians); CLI {out['cli_status_ms']:.0f} / "
        f"{out['cli_list50_ms']:.0f} / {out['cli_show_ms']:.0f} ms; walk of {walked:,} in "
        f"{pages} pages {out['walk_s']:.1f} s, RSS {out['rss_before_walk_mb']:.0f} → "
        f"{out['rss_after_walk_mb']:.0f} MB (peak {out['hwm_mb']:.0f})"
    )
    return out


# == workload d: batch creation through the API ===========================================


def wd_api_create(tmp: Path, sz: Sizes) -> dict[str, Any]:
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
    d = Daemon(tmp / "wd", env={"JOBCTL_QUOTA_SCHEDULES": "0"})
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
    out = {
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


def wb_rss(tmp: Path, sz: Sizes) -> dict[str, Any]:
    from jobctl.domain.clock import FakeClock
    from jobctl.store.sqlite import SqliteStore

    n = sz.schedules
    # First occurrences tomorrow: nothing falls due while the daemon is measured.
    t0 = floor_minute(dt.datetime.now(UTC)) + dt.timedelta(days=1)
    path = tmp / "rss.db"
    store = SqliteStore(path, FakeClock(t0))
    log(f"b: creating {n:,} schedules due tomorrow")
    rate = create_all(store, make_specs(n, t0, 5, seed=11))
    store.close()
    out: dict[str, Any] = {"create_rate": rate, "db_mb": path.stat().st_size / 1e6}
    for label, db in (("empty", None), ("full", path)):
        wait_quiet(f"daemon RSS ({label})")
        d = Daemon(tmp / f"wb-{label}", db=db)
        try:
            c = d.client()
            t = time.perf_counter()
            st = c.status()
            status_ms = (time.perf_counter() - t) * 1000
            time.sleep(0.5)
            out[label] = d.rss() | {
                "status_ms": status_ms,
                "ready_s": d.t_ready - d.t_spawn,
                "schedules": st["schedules"]["total"],
            }
            if label == "full":
                # What walking every schedule page costs the daemon (workload r again).
                t = time.perf_counter()
                listed = sum(len(p["items"]) for p in c.pages("/v1/schedules", {"limit": 1000}))
                out["list"] = d.rss() | {"seconds": time.perf_counter() - t, "listed": listed}
            c.close()
        finally:
            d.stop()
        log(f"b: daemon ({label}): {out[label]}")
    out["verified"] = out["full"]["schedules"] == n
    return out


# == workload c: jobctl next =============================================================


def wc_next(tmp: Path, sz: Sizes) -> dict[str, Any]:
    import jobctl

    cmd = [JOBCTL_BIN, "next", "0 6 * * *", "--tz", "Asia/Tokyo"]
    # As installed by pip: byte-compiled, so start-up does not recompile jobctl's modules
    # (an environment with PYTHONDONTWRITEBYTECODE=1 and no __pycache__ recompiles every
    # module on every run, which is not what users see).
    package = Path(jobctl.__file__).resolve().parent
    # (not check=True: a module that does not compile is reported and not timed here)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=False)
    env = clean_env(tmp)
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
    res = {
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


# == report ==============================================================================


def report(
    R: dict[str, Any], sz: Sizes, cmd: str, info: dict[str, str], elapsed: float
) -> tuple[str, list[tuple[str, bool]]]:
    """The section of docs/benchmarks.md, and each target met or missed."""
    lines = [
        MARKS[0],
        "",
        "## Schedules (`bench/bench_schedules.py`)",
        "",
        header(info, elapsed),
        "",
        f"Command: `{cmd}`",
        "",
        "| # | workload | result | target | verdict |",
        "|---|---|---:|---|---|",
    ]
    checks = _table(R, sz, lines)
    lines.append("")
    lines += [*_notes(R, sz), "", MARKS[1]]
    return "\n".join(lines), checks


def _table(R: dict[str, Any], sz: Sizes, lines: list[str]) -> list[tuple[str, bool]]:
    """Append the results table's rows to ``lines``; return each target met or missed."""
    n = sz.schedules
    checks: list[tuple[str, bool]] = []

    def row(num: str, name: str, value: str, target: str, ok: bool | None) -> None:
        lines.append(f"| {num} | {name} | {value} | {target} | {verdict(ok)} |")
        if ok is not None:
            checks.append((f"{num} {name}", ok))

    a, ad, b, c = (R.get(k, {}) for k in ("a", "a_daemon", "b", "c"))
    if "rate" in a:
        row(
            "a",
            f"materialize {n:,} due schedules in-process, `materialize({sz.batch})` (schedules/s)",
            fmt(a["rate"]),
            "≥ 20,000/s",
            a["rate"] >= TARGETS["materialize"],
        )
    if "rate" in ad:
        row(
            "a",
            f"materialize {n:,} due schedules in a real daemon, spawn → status counts "
            f"{n:,} jobs (s)",
            f"{ad['spawn_to_all']:.1f} s ({fmt(ad['rate'])}/s)",
            "",
            None,
        )
    if "rate" in ad:
        ms, rss = TARGETS["read_ms"], TARGETS["rss_mb"]
        row(
            "a",
            "`status` while the daemon materializes, p50 (ms)",
            f"{ad['status_p50_ms']:.1f}",
            "≤ 50 ms",
            ad["status_p50_ms"] <= ms,
        )
        row(
            "a",
            "`schedules list --limit 50` (API) while it materializes, p50 (ms)",
            f"{ad['list50_p50_ms']:.1f}",
            "≤ 50 ms",
            ad["list50_p50_ms"] <= ms,
        )
        row(
            "a",
            "daemon RSS while it materializes, max of samples (MB)",
            f"{ad['rss_during_max_mb']:.0f}",
            "≤ 150 MB",
            ad["rss_during_max_mb"] <= rss,
        )
    r = ad.get("reads", {})
    if "status_ms" in r:
        ms = TARGETS["read_ms"]
        row(
            "r",
            f"`status` with {n:,} schedules + {n:,} due jobs, median (ms)",
            f"{r['status_ms']:.1f}",
            "≤ 50 ms",
            r["status_ms"] <= ms,
        )
        row(
            "r",
            "`schedules list --limit 50` (API), median (ms)",
            f"{r['list50_ms']:.1f}",
            "≤ 50 ms",
            r["list50_ms"] <= ms,
        )
        row("r", "`schedules show ID` (API), median (ms)", f"{r['show_ms']:.1f}", "", None)
        row(
            "r",
            f"walk of all {r['walked']:,} schedules, pages of 1,000 (s)",
            f"{r['walk_s']:.1f}",
            "",
            None,
        )
        row(
            "r",
            "daemon RSS during the walk, peak (MB)",
            f"{r['hwm_mb']:.0f}",
            "≤ 150 MB",
            r["hwm_mb"] <= TARGETS["rss_mb"],
        )
    if "full" in b:
        row(
            "b",
            f"daemon RSS with {n:,} schedules, after ready + status (MB)",
            f"{b['full']['rss_mb']:.0f}",
            "≤ 150 MB",
            b["full"]["rss_mb"] <= TARGETS["rss_mb"],
        )
    if "median_ms" in c:
        row(
            "c",
            f'`jobctl next "0 6 * * *" --tz Asia/Tokyo`, median of {len(c["runs_ms"])} (ms)',
            f"{c['median_ms']:.0f}",
            "≤ 300 ms",
            c["median_ms"] <= TARGETS["next_ms"],
        )
    d = R.get("d", {})
    if "rate" in d:
        row(
            "d",
            f"create {n:,} schedules through the API, lists of 1,000 (schedules/s)",
            fmt(d["rate"]),
            "≥ 20,000/s",
            d["rate"] >= TARGETS["create"],
        )
    return checks


def _notes(R: dict[str, Any], sz: Sizes) -> list[str]:
    """The details under the table, one bullet per workload that ran."""
    n = sz.schedules
    a, ad, b, c, d = (R.get(k, {}) for k in ("a", "a_daemon", "b", "c", "d"))
    r = ad.get("reads", {})
    notes = []
    if "status_ms" in r:
        notes.append(
            f"* **r, reads**: on the daemon of a, once it held {n:,} schedules and {n:,} due "
            f"jobs (their queue paused). API medians of 30 calls through the shipped client: "
            f"status {r['status_ms']:.1f} ms (max {r['status_max_ms']:.1f}), first page of 50 "
            f"schedules {r['list50_ms']:.1f} ms (max {r['list50_max_ms']:.1f}), schedule "
            f"detail {r['show_ms']:.1f} ms (max {r['show_max_ms']:.1f}). As CLI commands "
            f"(median of 5, interpreter start-up included): `jobctl status` "
            f"{r['cli_status_ms']:.0f} ms, `jobctl schedules list --limit 50` "
            f"{r['cli_list50_ms']:.0f} ms, `jobctl schedules show` {r['cli_show_ms']:.0f} ms. "
            f"Walk of every page (`limit=1000`, following `next_cursor`): {r['walked']:,} "
            f"schedules in {r['pages']} pages, {r['walk_s']:.1f} s; daemon RSS "
            f"{r['rss_before_walk_mb']:.0f} MB before, {r['rss_after_walk_mb']:.0f} MB after, "
            f"peak {r['hwm_mb']:.0f} MB (VmHWM since start). Checked: the walk saw every "
            f"schedule once: {r['verified']}."
        )
    if "rate" in d:
        notes.append(
            f"* **d**: an empty daemon sent {n:,} schedules (the same mix of zones and cron "
            f"shapes, each with a command of its own) as {d['requests']} lists of 1,000 "
            f"`POST /v1/schedules` through the shipped client (`Client.create_schedules`), "
            f"from 2 threads with a kept-alive connection each: {d['seconds']:.1f} s; daemon "
            f"CPU {d.get('cpu_us', float('nan')):.0f} µs a schedule (user + system, all its "
            f"threads); daemon RSS afterwards {d['rss_mb']:.0f} MB (peak {d['hwm_mb']:.0f}). "
            f"Checked: every item answered `created: true` and status counts {n:,}: "
            f"{d['verified']}."
        )
    if "rate" in a:
        notes.append(
            f"* **a, in-process**: {n:,} schedules ({a['distinct']} distinct zone + cron "
            f"pairs over {len(ZONES)} zones: hourly, daily, weekday, weekly, monthly, "
            f"twice-daily, yearly, `*/5`, `*/15` …; default policy: misfire `once`, overlap "
            f"`skip`), each with exactly one occurrence in a 5-minute window, created through "
            f"`SqliteStore.create_schedules`, lists of 1,000 ({fmt(a['create_rate'])} "
            f"schedules/s). The `FakeClock` is then set to the window's end and "
            f"`materialize({sz.batch})` is called until it reports 0 schedules: "
            f"{a['calls']} calls, {a['seconds']:.2f} s, p50 {a['call_p50_ms']:.0f} ms and max "
            f"{a['call_max_ms']:.0f} ms per call (each one fsync'd transaction). Checked: "
            f"{a['created']:,} jobs created, store counts {n:,} scheduled, no schedule left "
            f"due: {a['verified']}."
        )
    if "rate" in ad:
        notes.append(
            f"* **a, daemon**: a copy of the same database (taken before the in-process run; "
            f"their queue paused so the daemon only materializes) given to `jobctl daemon`; "
            f"every occurrence is due at start-up. Ready {ad['spawn_to_ready']:.1f} s after "
            f"spawn; `GET /v1/status` (polled every 50 ms) counted {n:,} jobs "
            f"{ad['spawn_to_all']:.1f} s after spawn; the daemon log's first to last "
            f"`event=enqueued` line took {ad['log_first_to_last']:.1f} s "
            f"({fmt(ad['log_rate'])}/s). Status latency during it: p50 "
            f"{ad['status_p50_ms']:.0f} ms, max {ad['status_max_ms']:.0f} ms. RSS afterwards "
            f"{ad['rss_after_mb']:.0f} MB (peak {ad['hwm_mb']:.0f}). Checked with "
            f"`jobctl status --json`: {ad['jobs']:,} jobs, all scheduled, one log line each: "
            f"{ad['verified']}."
        )
    if "full" in b:
        lst = b.get("list", {})
        notes.append(
            f"* **b**: {n:,} schedules first due tomorrow (DB {b['db_mb']:.0f} MB), daemon "
            f"ready in {b['full']['ready_s']:.1f} s; RSS {b['full']['rss_mb']:.0f} MB (peak "
            f"{b['full']['hwm_mb']:.0f}) against {b['empty']['rss_mb']:.0f} MB on an empty "
            f"database; status took {b['full']['status_ms']:.0f} ms. Not part of the target: "
            f"walking all {lst.get('listed', 0):,} (pages of 1,000 "
            f"`GET /v1/schedules?limit=1000&cursor=…`) took "
            f"{lst.get('seconds', float('nan')):.1f} s and left RSS at "
            f"{lst.get('rss_mb', float('nan')):.0f} MB (peak {lst.get('hwm_mb', float('nan')):.0f}"
            f" MB)."
        )
    if "median_ms" in c:
        notes.append(
            f"* **c**: `{JOBCTL_BIN} next …` as a subprocess, wall time including interpreter "
            f"start-up, after one untimed warm-up run"
            + (
                ", with bytecode available as after a `pip install` (jobctl's package "
                "byte-compiled with `compileall` first; the runs do not inherit "
                "`PYTHONDONTWRITEBYTECODE`)"
                if c.get("bytecode")
                else ""
            )
            + "; runs (ms): "
            + ", ".join(f"{x:.0f}" for x in c["runs_ms"])
            + f". A bare `python -c pass` takes {c['python_bare_ms']:.0f} ms here."
        )
    for key in ("a", "a_daemon", "b", "c", "d"):
        if "error" in R.get(key, {}):
            notes.append(f"* **{key} failed**: `{R[key]['error']}`")
    return notes


# == main ================================================================================


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 schedules")
    ap.add_argument("--only", default="a,b,c,d", help="workloads to run, e.g. a,c")
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon part of a")
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
    return ap.parse_args()


def run_workloads(args: argparse.Namespace, tmp: Path, sz: Sizes) -> dict[str, Any]:
    """Each workload asked for; one that fails is recorded and the others still run."""
    only = set(args.only.split(","))
    R: dict[str, Any] = {}

    def run(key: str, fn: Any) -> None:
        try:
            R[key] = fn(tmp, sz)
        except Exception as exc:  # one failing workload must not lose the others
            log(f"{key} FAILED: {exc!r}")
            R[key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}

    if "a" in only:
        run("a", wa_inprocess)
        if not args.no_daemon and "error" not in R["a"]:
            run("a_daemon", wa_daemon)
    if "b" in only:
        run("b", wb_rss)
    if "c" in only:
        run("c", wc_next)
    if "d" in only:
        run("d", wd_api_create)
    return R


def main() -> int:
    args = parse_args()
    if args.from_json:
        C.render_saved(args.from_json, report, Sizes, MARKS, write=not args.no_write)
        return 0
    sz = QUICK if args.quick else FULL
    QUIET_BUDGET[0] = args.quiet_wait
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-sched-", dir=args.tmpdir))
    started = time.time()
    info = machine()
    log(f"bench_schedules {'quick' if args.quick else 'full'} in {tmp}: {info}")
    try:
        R = run_workloads(args, tmp, sz)
    finally:
        kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.time() - started
    C.conclude("bench_schedules", R, sz, info, elapsed, report, MARKS, write=not args.no_write)
    log(f"done in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

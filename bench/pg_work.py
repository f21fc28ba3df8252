"""The workloads of ``bench_pg``: enqueue through the API on both backends, the scheduler's
ceiling for 1, 2 and 4 daemons on one database, end-to-end with 2 real daemons, the
cross-daemon dispatch lag, and procrastinate on the same server.
"""

from __future__ import annotations

import datetime as dt
import json
import resource
import subprocess
import sys
import time
from contextlib import nullcontext
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypedDict

import _common as C
import peer_procrastinate as PP
from _common import log
from core_harness import CpuSampler, _summarise_clients, iso_ms
from pg_harness import PgCpu, PgDaemon, database, doubles, query, uptime
from pg_report import E2E, LAG_EVERY, Ceiling, Enqueue, Lag, Peer, Sizes

FAR = "2099-01-01T00:00:00Z"
ENGINE = str(Path(__file__).resolve().parent / "pg_engine.py")


def enqueue(tmp: Path, sz: Sizes, backend: str, mode: str) -> Enqueue:
    """bench_core's workload 1 against one daemon on ``backend`` (``sqlite``/``pg``):
    ``single``/``batch`` with the bench's lean HTTP client, ``client`` with the shipped
    ``jobctl.client`` (what a Python producer pays: its CPU competes with the daemon's)."""
    per = sz.batch if mode == "batch" else 1
    job = {"command": ["true"], "run_at": FAR}
    warmup = 20 if per == 1 else 2
    wd = tmp / f"enqueue-{backend}-{mode}"
    load = uptime()
    with database() if backend == "pg" else nullcontext("") as dsn:
        d = PgDaemon(wd, dsn, sz.concurrency) if backend == "pg" else C.Daemon(wd, sz.concurrency)
        try:
            sampler = CpuSampler(d.pid)
            pg = PgCpu(dsn) if dsn else None
            res = C.run_enqueue_clients(
                str(d.sock), mode, job, per, warmup, sz.enqueue_seconds, sz.clients
            )
            sampler.stop()
            pg_cpu = pg.stop() if pg else 0.0
            s = _summarise_clients(res)
            http = C.UdsHttp(str(d.sock))
            stored = http.json("GET", "/v1/status")["counts"]["scheduled"]
            http.close()
        finally:
            d.stop()
    out: Enqueue = {
        "rate": s["rate"],
        "jobs": s["jobs"],
        "errors": s["errors"],
        "stored": stored,
        "daemon_cores": sampler.cores(s["t0"], s["t1"]),
        "req_p50_ms": s["req_p50_ms"],
        "req_p99_ms": s["req_p99_ms"],
        "pg_cpu_s": pg_cpu,
        "load": load,
        "verified": stored == s["jobs"] + s["warm_jobs"] and s["errors"] == 0,
    }
    cpu = ""
    if mode == "client":
        out["client_cpu_us"] = C.median([r["client_cpu_us"] for r in res])
        cpu = f", client CPU {out['client_cpu_us']:.0f} us/call"
    log(
        f"enqueue {backend} {mode}: {out['rate']:,.0f} jobs/s (daemon "
        f"{out['daemon_cores']:.2f} cores{cpu}, verified {out['verified']}; load {load})"
    )
    return out


def open_store(db: str, clock: Any) -> Any:
    """A store on ``db``: a ``postgresql://`` URL, else a SQLite file."""
    if db.startswith("postgresql://"):
        from jobctl.store.pg.store import PostgresStore

        return PostgresStore(db, clock, pool_size=8)
    from jobctl.store.sqlite import SqliteStore

    return SqliteStore(Path(db), clock)


def _fill(db: str, t0: dt.datetime, due: dt.datetime, n: int) -> None:
    from jobctl.domain.clock import FakeClock
    from jobctl.domain.models import JobSpec

    store = open_store(db, FakeClock(t0))
    try:
        for first in range(0, n, 5000):
            store.insert([JobSpec(("true",), due, 0) for _ in range(min(5000, n - first))])
    finally:
        store.close()


def _engines(db: str, k: int, slots: int, t0: dt.datetime, due: dt.datetime) -> list[Any]:
    args = [str(slots), t0.isoformat(), due.isoformat()]
    procs = [
        subprocess.Popen(
            [sys.executable, ENGINE, db, f"bench-pg:{i}", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(k)
    ]
    for p in procs:
        if p.stdout is None or p.stdout.readline().strip() != "ready":
            raise RuntimeError("an engine did not become ready")
    return procs


def _say(procs: list[Any], line: str) -> None:
    for p in procs:
        p.stdin.write(line + "\n")
        p.stdin.flush()


LEFT = "SELECT count(*) FROM jobs WHERE status <> 'succeeded'"
RUNS = "SELECT count(*) FROM (SELECT job_id FROM attempts GROUP BY job_id HAVING count(*) > 1) x"


def _drain(db: str, procs: list[Any], timeout: float = 300) -> tuple[float, list[Any], int]:
    """Say go, wait until no job is left; (server CPU seconds, engines' reports, double
    runs). The poll's own connection is left out of the server's CPU."""
    if db.startswith("postgresql://"):
        import psycopg

        conn: Any = psycopg.connect(db, autocommit=True)
        cpu: PgCpu | None = PgCpu(db, exclude=frozenset({conn.info.backend_pid}))
    else:
        import sqlite3

        conn, cpu = sqlite3.connect(f"file:{db}?mode=ro", uri=True), None
    try:
        _say(procs, "go")
        deadline = time.time() + timeout
        while conn.execute(LEFT).fetchone()[0] and time.time() < deadline:
            time.sleep(0.1)
        server = cpu.stop() if cpu else 0.0
        _say(procs, "stop")
        got = [json.loads(p.stdout.readline()) for p in procs]
        return server, got, int(conn.execute(RUNS).fetchone()[0])
    finally:
        conn.close()


def ceiling(tmp: Path, sz: Sizes, k: int, backend: str = "pg") -> Ceiling:
    """``k`` in-process daemons (instant executor) drain ``ceiling_jobs`` due jobs."""
    n, load = sz.ceiling_jobs, uptime()
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
    due = t0 + dt.timedelta(seconds=10)
    where = database() if backend == "pg" else nullcontext(str(tmp / f"ceiling-{k}.db"))
    with where as db:
        _fill(db, t0, due, n)
        procs = _engines(db, k, sz.slots, t0, due)
        try:
            pg_cpu, got, runs = _drain(db, procs)
        finally:
            for p in procs:
                C.stop_proc(p)
    ids = [i for g in got for i in g["ids"]]
    if not ids:  # e.g. the timer failing on every tick (the engines' stderr says why)
        raise RuntimeError(f"ceiling {backend} {k}: no engine started a job")
    t_go = min(g["t_go"] for g in got)
    wall = max(g["last_finish"] for g in got) - t_go
    out: Ceiling = {
        "backend": backend,
        "daemons": k,
        "n": n,
        "rate": n / wall,
        "wall": wall,
        "daemon_cpu_s": sum(g["cpu_s"] for g in got),
        "pg_cpu_s": pg_cpu,
        "per_daemon": [g["started"] for g in got],
        "claims": sum(g["claims"] for g in got),
        "double_starts": len(ids) - len(set(ids)),
        "double_runs": runs,
        "fenced": sum(g["fenced"] for g in got),
        "load": load,
        "verified": len(set(ids)) == n and runs == 0,
    }
    log(
        f"ceiling, {backend}, {k} daemon(s): {out['rate']:,.0f} jobs/s over {wall:.2f} s, split "
        f"{out['per_daemon']}, CPU s/1k jobs server {1000 * pg_cpu / n:.2f} daemons "
        f"{1000 * out['daemon_cpu_s'] / n:.2f}; verified {out['verified']}; load {load}"
    )
    return out


def _schedule(d: PgDaemon) -> str:
    """An every-second ``true`` schedule made on ``d``: both daemons' materializers race."""
    http = d.http()
    made = http.json("POST", "/v1/schedules", {"every": 1, "job": {"command": ["true"]}})
    http.close()
    return str(made["id"])


def _wait_succeeded(dsn: str, ids: list[int], timeout: float, cpu: bool = False) -> float:
    """Wait until every job of ``ids`` succeeded; with ``cpu``, the CPU seconds the
    database's backends used meanwhile (this poll's own connection left out)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as poll:
        sampler = PgCpu(dsn, exclude=frozenset({poll.info.backend_pid})) if cpu else None
        deadline = time.time() + timeout
        while time.time() < deadline:
            row = poll.execute(
                "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status <> 'succeeded'", (ids,)
            ).fetchone()
            if row is not None and row[0] == 0:
                return sampler.stop() if sampler else 0.0
            time.sleep(0.25)
    raise RuntimeError(f"jobs not done after {timeout:.0f} s")


def _fired(dsn: str) -> int:
    ((n,),) = query(dsn, "SELECT count(*) FROM jobs WHERE schedule_id IS NOT NULL")
    return int(n)


def _post(d: PgDaemon, jobs: list[dict[str, Any]], batch: int) -> list[int]:
    """Enqueue ``jobs`` on ``d`` in requests of ``batch``; their ids in order."""
    http = d.http()
    ids: list[int] = []
    for i in range(0, len(jobs), batch):
        ids += [j["id"] for j in http.json("POST", "/v1/jobs", jobs[i : i + batch])]
    http.close()
    return ids


def _spans(dsn: str, ids: list[int]) -> tuple[int, int, list[int]]:
    """(first start, last finish) in ms of the jobs' attempts, and how many each daemon ran."""
    ((first, last),) = query(
        dsn, "SELECT min(started_at), max(finished_at) FROM attempts WHERE job_id = ANY(%s)", ids
    )
    split = query(
        dsn,
        "SELECT lease_owner, count(*) FROM attempts WHERE job_id = ANY(%s) GROUP BY 1 ORDER BY 1",
        ids,
    )
    return int(first), int(last), [int(k) for _, k in split]


def e2e(tmp: Path, sz: Sizes) -> E2E:
    """2 real daemons run ``e2e_jobs`` ``true`` jobs enqueued through the first."""
    n, load = sz.e2e_jobs, uptime()
    with database() as dsn:
        a = PgDaemon(tmp / "e2e-a", dsn, sz.concurrency)
        b = PgDaemon(tmp / "e2e-b", dsn, sz.concurrency)
        try:
            _schedule(a)
            due = time.time() + 3.0 + n / 5000
            t = time.time()
            ids = _post(a, [{"command": ["true"], "run_at": iso_ms(due)}] * n, 1000)
            enqueue_s = time.time() - t
            time.sleep(max(0.0, due - time.time() - 0.5))
            d0 = C.cpu_seconds(a.pid) + C.cpu_seconds(b.pid)
            pg_cpu = _wait_succeeded(dsn, ids, 900, cpu=True)
            daemon_cpu = C.cpu_seconds(a.pid) + C.cpu_seconds(b.pid) - d0
        finally:
            a.stop()
            b.stop()
        first, last, split = _spans(dsn, ids)
        runs, fires = doubles(dsn)
        fired = _fired(dsn)
    wall = (last - first) / 1000
    out: E2E = {
        "n": n,
        "rate": n / wall,
        "wall": wall,
        "enqueue_s": enqueue_s,
        "daemon_cpu_s": daemon_cpu,
        "pg_cpu_s": pg_cpu,
        "per_daemon": split,
        "double_runs": runs,
        "double_fires": fires,
        "fired": fired,
        "load": load,
        "verified": len(set(ids)) == n and runs == 0 and fires == 0,
    }
    log(
        f"e2e: {out['rate']:,.0f} jobs/s over {wall:.1f} s, split {out['per_daemon']}, "
        f"double runs {runs}, fires {fires}/{fired}; load {load}"
    )
    return out


def _busy_a(a: PgDaemon) -> int:
    """Fill A's only slot with a long ``sleep``; the job's id once A runs it."""
    http = a.http()
    job = http.json("POST", "/v1/jobs", {"command": ["sleep", "600"]})
    deadline = time.time() + 30
    while http.json("GET", f"/v1/jobs/{job['id']}")["status"] != "running":
        if time.time() > deadline:
            raise RuntimeError("A did not start its sleep")
        time.sleep(0.05)
    http.close()
    return int(job["id"])


def _enqueue_now(a: PgDaemon, n: int, every: float) -> list[tuple[int, float]]:
    """``n`` jobs due now, one per request on A, ``every`` seconds apart: (id, ack time)."""
    http = a.http()
    acks: list[tuple[int, float]] = []
    body = json.dumps({"command": ["true"]}).encode()
    nxt = time.time()
    for _ in range(n):
        _status, payload = http.request("POST", "/v1/jobs", body)
        acks.append((json.loads(payload)["id"], time.time()))
        nxt += every
        time.sleep(max(0.0, nxt - time.time()))
    http.close()
    return acks


class _Lags(TypedDict):
    now_n: int
    ack_p50_ms: float
    ack_p99_ms: float
    ack_max_ms: float
    spread_n: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def _lags(rows: list[tuple[Any, ...]], sids: list[int], acks: list[tuple[int, float]]) -> _Lags:
    """Percentiles of start − run_at (``sids``) and of start − A's answer (``acks``) from
    the rows (id, run_at ms, first attempt's start ms, lease owner)."""
    by_id = {r[0]: r for r in rows}
    spread = [(by_id[i][2] - by_id[i][1]) / 1000 for i in sids]
    ack = [by_id[i][2] / 1000 - at for i, at in acks]
    return {
        "now_n": len(acks),
        "ack_p50_ms": C.pct(ack, 50) * 1000,
        "ack_p99_ms": C.pct(ack, 99) * 1000,
        "ack_max_ms": max(ack) * 1000,
        "spread_n": len(sids),
        "p50_ms": C.pct(spread, 50) * 1000,
        "p99_ms": C.pct(spread, 99) * 1000,
        "max_ms": max(spread) * 1000,
    }


def _first_attempts(dsn: str, ids: list[int]) -> list[tuple[Any, ...]]:
    """(id, run_at ms, first attempt's start ms, its lease owner) of each job."""
    return query(
        dsn,
        "SELECT j.id, j.run_at, a.started_at, a.lease_owner FROM jobs j "
        "JOIN attempts a ON a.job_id = j.id AND a.number = 1 WHERE j.id = ANY(%s)",
        ids,
    )


def _doubles_but(dsn: str, sleeper: int) -> tuple[int, int, int]:
    """(double runs, double fires, occurrences made), the sleep that held A's slot left
    out (stopped with A, it may be run again)."""
    runs, fires = doubles(dsn)
    again = query(dsn, "SELECT 1 FROM attempts WHERE job_id = %s AND number > 1", sleeper)
    return runs - int(bool(again)), fires, _fired(dsn)


def lag(tmp: Path, sz: Sizes) -> Lag:
    """Jobs enqueued on A (its one slot busy) run on B: start − ack, start − run_at."""
    load = uptime()
    with database() as dsn:
        a = PgDaemon(tmp / "lag-a", dsn, 1)
        b: PgDaemon | None = None
        try:
            sleeper = _busy_a(a)
            b = PgDaemon(tmp / "lag-b", dsn, sz.concurrency)
            http = b.http()
            owner_b = http.json("GET", "/v1/status")["owner"]
            http.close()
            _schedule(a)
            step = sz.lag_spread / sz.lag_spread_jobs
            t0 = time.time() + 3.0
            spread = [{"command": ["true"], "run_at": iso_ms(t0 + i * step)}
                      for i in range(sz.lag_spread_jobs)]  # fmt: skip
            sids = _post(a, spread, 500)
            late = time.time() > t0
            _wait_succeeded(dsn, sids, sz.lag_spread + 120)
            acks = _enqueue_now(a, sz.lag_now, LAG_EVERY)  # after: B is idle again
            ids = sids + [i for i, _ in acks]
            _wait_succeeded(dsn, ids, 120)
        finally:
            a.stop()
            if b is not None:
                b.stop()
        rows, (runs, fires, fired) = _first_attempts(dsn, ids), _doubles_but(dsn, sleeper)
    out: Lag = {
        **_lags(rows, sids, acks),
        "late_enqueue": late,
        "on_b": sum(r[3] == owner_b for r in rows),
        "double_runs": runs,
        "double_fires": fires,
        "fired": fired,
        "load": load,
        "verified": len(rows) == len(ids) and runs == 0 and fires == 0,
    }
    log(
        f"lag: run_at → start p50 {out['p50_ms']:.1f} p99 {out['p99_ms']:.1f} ms; ack → start "
        f"p50 {out['ack_p50_ms']:.1f} p99 {out['ack_p99_ms']:.1f} ms; on B {out['on_b']}/"
        f"{len(ids)}; load {load}"
    )
    return out


def procrastinate(tmp: Path, sz: Sizes) -> Peer:
    """procrastinate's enqueue (8 clients, ``defer()``) and one worker's drain."""
    load = uptime()
    with database() as dsn:
        PP.apply_schema(dsn)
        res = C.run_clients(PP.enqueue_client, [(dsn, 20, sz.enqueue_seconds)] * sz.clients)
        s = _summarise_clients(res)
        PP.fill(dsn, sz.peer_jobs)
        cpu = PgCpu(dsn)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        worker = PP.start_worker(dsn, sz.concurrency)
        try:
            worker.wait(600)
        finally:
            C.stop_proc(worker)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        pg_cpu = cpu.stop()
        done_n, first, last = PP.drained(dsn)
    out: Peer = {
        "version": version("procrastinate"),
        "enqueue_rate": s["rate"],
        "enqueue_p50_ms": s["req_p50_ms"],
        "drain_n": done_n,
        "drain_rate": done_n / (last - first) if last > first else float("nan"),
        "worker_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "pg_cpu_s": pg_cpu,
        "load": load,
        "verified": done_n == sz.peer_jobs,
    }
    log(
        f"procrastinate: enqueue {out['enqueue_rate']:,.0f}/s, drain {out['drain_rate']:,.0f}/s "
        f"({done_n}/{sz.peer_jobs}); load {load}"
    )
    return out

"""Workload 2 of ``bench_core``: end-to-end, N jobs running ``true`` all due at one instant."""

from __future__ import annotations

import math
import shutil
import sqlite3
import time
from pathlib import Path
from typing import cast

import _common as C
from _common import log
from core_harness import CpuSampler, Daemon, Sizes, _agg, guarded_runs, iso_ms
from core_peers import HueyConsumer, run_aps
from core_results import Run, Throughput


def _list_ids(http: C.UdsHttp, status: str) -> list[int]:
    ids: list[int] = []
    cursor = None
    while True:
        path = f"/v1/jobs?status={status}&limit=10000" + (f"&cursor={cursor}" if cursor else "")
        page = http.json("GET", path)
        ids += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


def _margin(n: int, rate: float | None, floor: float) -> float:
    """Seconds to give an enqueue of ``n`` jobs at ``rate`` before they fall due."""
    return floor if not rate or math.isnan(rate) else max(floor, 1.25 * n / rate + 2.0)


def w2_jobctl(tmp: Path, sz: Sizes, batch_rate: float | None) -> Throughput:
    n = sz.e2e_jobs
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "jobctl e2e"):
        d = Daemon(tmp / f"w2-{r}", sz.concurrency)
        try:
            http = d.http()
            due = time.time() + _margin(n, batch_rate, 3.0)
            jobs = [{"command": ["true"], "run_at": iso_ms(due)}]
            ids: list[int] = []
            t = time.time()
            for i in range(0, n, 1000):
                ids += [j["id"] for j in http.json("POST", "/v1/jobs", jobs * min(1000, n - i))]
            enqueue_s, late = time.time() - t, time.time() > due
            sampler = CpuSampler(d.pid)
            deadline = due + 900
            while True:
                counts = http.json("GET", "/v1/status")["counts"]
                if counts["succeeded"] + counts["dead"] + counts["cancelled"] >= n or (
                    time.time() > deadline
                ):
                    break
                time.sleep(0.25)
            sampler.stop()
            succeeded = set(_list_ids(http, "succeeded"))
            http.close()
            con = sqlite3.connect(f"file:{d.db}?mode=ro", uri=True)
            first, last, attempts, ok = con.execute(
                "SELECT min(started_at), max(finished_at), count(*), "
                "sum(outcome = 'succeeded') FROM attempts"
            ).fetchone()
            con.close()
            wall = (last - first) / 1000
            s: Run = {
                "rate": n / wall,
                "wall": wall,
                "enqueue_s": enqueue_s,
                "late_enqueue": late,
                "attempts": attempts,
                "counts": counts,
                "daemon_cores": sampler.cores(first / 1000, last / 1000),
                "due_to_last": last / 1000 - due,
                "verified": set(ids) == succeeded and len(ids) == n and ok == n == attempts,
            }
            runs.append(s)
            log(
                f"jobctl e2e run {r + 1}: {s['rate']:.0f} jobs/s over {wall:.1f} s "
                f"(daemon {s['daemon_cores']:.2f} cores, enqueue {enqueue_s:.1f} s, "
                f"all {n} succeeded: {s['verified']})"
            )
        finally:
            d.stop()  # directory kept: see 'Kept run directories' at the top
    return _agg(runs, extra=("daemon_cores", "enqueue_s"))


def w2_huey(tmp: Path, sz: Sizes, rate: float | None) -> Throughput:
    import peer_huey

    n = sz.e2e_jobs
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "huey e2e"):
        wd = tmp / f"w2-huey-{r}"
        wd.mkdir(parents=True)
        db = wd / "huey.db"
        peer_huey.storage_pragmas(str(db))
        cons = HueyConsumer(db, sz.concurrency, wd)
        try:
            due = time.time() + _margin(n, rate, 5.0) + 2.0
            items = [(due, 0.0)] * n
            res = C.run_clients(
                C.huey_fill_client,
                [(str(db), "true", items[i :: sz.clients]) for i in range(sz.clients)],
            )
            enqueue_s = max(x["last"] for x in res) - min(x["t0"] for x in res)
            late = max(x["last"] for x in res) > due
            locked = sum(x["locked"] for x in res)
            h, _ = peer_huey.make(str(db))
            deadline = due + 900
            while h.result_count() < n and time.time() < deadline:
                time.sleep(0.5)
            results = peer_huey.results(h)
            good = [x for x in results if isinstance(x, (tuple, list))]
            first, last = min(x[0] for x in good), max(x[1] for x in good)
            s: Run = {
                "rate": len(good) / (last - first),
                "wall": last - first,
                "done": len(good),
                "enqueue_s": enqueue_s,
                "late_enqueue": late,
                "due_to_last": last - due,
                "locked_retries": locked,
                "verified": len(good) == n,
            }
            runs.append(s)
            log(
                f"huey e2e run {r + 1}: {s['rate']:.0f} jobs/s over {s['wall']:.1f} s "
                f"({len(good)}/{n} done, enqueue {enqueue_s:.1f} s, late {late})"
            )
        finally:
            cons.stop()
            shutil.rmtree(wd, ignore_errors=True)
    return _agg(runs, extra=("enqueue_s",))


def w2_aps(tmp: Path, sz: Sizes, rate: float | None) -> Throughput:
    n = sz.aps_e2e_jobs
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "APScheduler e2e"):
        wd = tmp / f"w2-aps-{r}"
        wd.mkdir(parents=True)
        try:
            margin = _margin(n, rate, 5.0) + 2.0
            res = cast(
                Run,
                run_aps(
                    "e2e",
                    wd / "aps.db",
                    {
                        "workers": sz.concurrency,
                        "clients": sz.clients,
                        "n": n,
                        "margin": margin,
                        "timeout": 900,
                    },
                    timeout=margin + 1200,
                ),
            )
            res["verified"] = res["done"] == n and res["left"] == 0
            runs.append(res)
            log(
                f"APScheduler e2e run {r + 1}: {res.get('rate', float('nan')):.0f} jobs/s over "
                f"{res.get('wall', float('nan')):.1f} s ({res['done']}/{n} done, add_job "
                f"{res['add_seconds']:.1f} s, late {res['late_enqueue']})"
            )
        finally:
            shutil.rmtree(wd, ignore_errors=True)
    return _agg(runs, extra=("add_seconds",))


# -- workload 3: dispatch lag -------------------------------------------------------

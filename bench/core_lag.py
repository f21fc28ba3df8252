"""Workload 3 of ``bench_core``: dispatch lag of jobs due at spread times."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import _common as C
from _common import log
from core_e2e import _margin
from core_harness import Daemon, Sizes, guarded_runs, iso_ms, parse_iso
from core_peers import HueyConsumer, run_aps
from core_results import Lag, Run


def _lag_stats(dispatch: list[float], execs: list[float]) -> Run:
    return {
        "p50": C.pct(dispatch, 50) * 1000,
        "p99": C.pct(dispatch, 99) * 1000,
        "max": max(dispatch) * 1000 if dispatch else float("nan"),
        "exec_p50": C.pct(execs, 50) * 1000,
        "exec_p99": C.pct(execs, 99) * 1000,
        "exec_max": max(execs) * 1000 if execs else float("nan"),
    }


def _agg_lag(runs: list[Run]) -> Lag:
    """Medians over the kept runs of each lag percentile."""
    return {
        "p50": C.median([r["p50"] for r in runs]),
        "p99": C.median([r["p99"] for r in runs]),
        "max": C.median([r["max"] for r in runs]),
        "exec_p50": C.median([r["exec_p50"] for r in runs]),
        "exec_p99": C.median([r["exec_p99"] for r in runs]),
        "exec_max": C.median([r["exec_max"] for r in runs]),
        "runs": runs,
        "verified": all(r["verified"] for r in runs),
    }


def w3_jobctl(tmp: Path, sz: Sizes) -> Lag:
    n, step = sz.lag_jobs, sz.lag_spread / sz.lag_jobs
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "jobctl lag"):
        d = Daemon(tmp / f"w3-{r}", sz.concurrency)
        try:
            http = d.http()
            t0 = time.time() + 3.0
            jobs = [
                {"command": ["date", "+%s.%N"], "run_at": iso_ms(t0 + i * step)} for i in range(n)
            ]
            ids: list[int] = []
            for i in range(0, n, 500):
                ids += [j["id"] for j in http.json("POST", "/v1/jobs", jobs[i : i + 500])]
            late = time.time() > t0
            deadline = t0 + sz.lag_spread + 120
            while time.time() < deadline:
                if http.json("GET", "/v1/status")["counts"]["succeeded"] >= n:
                    break
                time.sleep(0.25)
            dispatch, execs, ok = [], [], 0
            for job_id in ids:
                job = http.json("GET", f"/v1/jobs/{job_id}")
                run_at = parse_iso(job["run_at"])
                first = job["attempts"][0]
                dispatch.append(parse_iso(first["started_at"]) - run_at)
                execs.append(float(first["output_tail"]) - run_at)
                ok += job["status"] == "succeeded"
            http.close()
            s = _lag_stats(dispatch, execs) | {"late_enqueue": late, "verified": ok == n}
            runs.append(s)
            log(
                f"jobctl lag run {r + 1}: p50 {s['p50']:.1f} p99 {s['p99']:.1f} max "
                f"{s['max']:.1f} ms (process exec p99 {s['exec_p99']:.1f} ms; {ok}/{n} ok)"
            )
        finally:
            d.stop()  # directory kept: see 'Kept run directories' at the top
    return _agg_lag(runs)


def w3_huey(tmp: Path, sz: Sizes) -> Lag:
    import peer_huey

    n, step = sz.lag_jobs, sz.lag_spread / sz.lag_jobs
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "huey lag"):
        wd = tmp / f"w3-huey-{r}"
        wd.mkdir(parents=True)
        db = wd / "huey.db"
        peer_huey.storage_pragmas(str(db))
        cons = HueyConsumer(db, sz.concurrency, wd)
        try:
            t0 = time.time() + 5.0
            items = [(round(t0 + i * step, 6),) * 2 for i in range(n)]
            res = C.run_clients(
                C.huey_fill_client, [(str(db), "lag", items[i::4]) for i in range(4)]
            )
            late = max(x["last"] for x in res) > t0
            locked = sum(x["locked"] for x in res)
            h, _ = peer_huey.make(str(db))
            deadline = t0 + sz.lag_spread + 120
            while h.result_count() < n and time.time() < deadline:
                time.sleep(0.25)
            got = [x for x in peer_huey.results(h) if isinstance(x, (tuple, list))]
            s = _lag_stats([x[1] - x[0] for x in got], [x[2] - x[0] for x in got])
            s |= {"late_enqueue": late, "locked_retries": locked, "verified": len(got) == n}
            runs.append(s)
            log(
                f"huey lag run {r + 1}: p50 {s['p50']:.1f} p99 {s['p99']:.1f} max "
                f"{s['max']:.1f} ms ({len(got)}/{n} ok, late enqueue {late})"
            )
        finally:
            cons.stop()
            shutil.rmtree(wd, ignore_errors=True)
    return _agg_lag(runs)


def w3_aps(tmp: Path, sz: Sizes, rate: float | None) -> Lag:
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "APScheduler lag"):
        wd = tmp / f"w3-aps-{r}"
        wd.mkdir(parents=True)
        try:
            margin = _margin(sz.lag_jobs, rate, 3.0) + 2.0
            res = run_aps(
                "lag",
                wd / "aps.db",
                {
                    "workers": sz.concurrency,
                    "clients": sz.clients,
                    "n": sz.lag_jobs,
                    "spread": sz.lag_spread,
                    "margin": margin,
                    "timeout": 300,
                },
                timeout=margin + 600,
            )
            s = _lag_stats(res["dispatch"], res["exec"])
            s |= {"late_enqueue": res["late_enqueue"], "verified": res["done"] == sz.lag_jobs}
            runs.append(s)
            log(
                f"APScheduler lag run {r + 1}: p50 {s['p50']:.1f} p99 {s['p99']:.1f} max "
                f"{s['max']:.1f} ms ({res['done']}/{sz.lag_jobs} ok)"
            )
        finally:
            shutil.rmtree(wd, ignore_errors=True)
    return _agg_lag(runs)


# -- workload 4: the store with big backlogs ----------------------------------------

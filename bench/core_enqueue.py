"""Workload 1 of ``bench_core``: durable enqueue throughput, 8 concurrent clients: one job per
request, 500 per request, one per call through ``jobctl.client``; huey and APScheduler.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

import _common as C
from _common import log
from core_harness import (
    FAR,
    CpuSampler,
    Daemon,
    Extra,
    Sizes,
    _agg,
    _summarise_clients,
    guarded_runs,
)
from core_peers import HueyConsumer, _huey_settled_count, run_aps
from core_results import Run, Throughput


def w1_jobctl(tmp: Path, sz: Sizes, mode: str) -> Throughput:
    """``single``/``batch``: the bench's raw client; ``client``: the shipped jobctl.client."""
    per = sz.batch if mode == "batch" else 1
    job = {"command": ["true"], "run_at": FAR}
    warmup = 20 if per == 1 else 2
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, f"jobctl enqueue {mode}"):
        d = Daemon(tmp / f"w1-{mode}-{r}", sz.concurrency)
        try:
            sampler = CpuSampler(d.pid)
            res = C.run_enqueue_clients(
                str(d.sock), mode, job, per, warmup, sz.enqueue_seconds, sz.clients
            )
            sampler.stop()
            s = _summarise_clients(res)
            if mode == "client":
                s["client_cpu_us"] = C.median([x["client_cpu_us"] for x in res])
            s["daemon_cores"] = sampler.cores(s["t0"], s["t1"])
            http = d.http()
            stored = http.json("GET", "/v1/status")["counts"]["scheduled"]
            http.close()
            s["verified"] = stored == s["jobs"] + s["warm_jobs"] and s["errors"] == 0
            s["stored"] = stored
            runs.append(s)
            log(
                f"jobctl enqueue {mode} run {r + 1}: {s['rate']:.0f} jobs/s "
                f"(daemon {s['daemon_cores']:.2f} cores, req p50 {s['req_p50_ms']:.1f} ms, "
                f"stored {stored}, verified {s['verified']})"
            )
        finally:
            d.stop()
            shutil.rmtree(d.dir, ignore_errors=True)
    extra: tuple[Extra, ...] = ("daemon_cores", "req_p50_ms", "req_p99_ms")
    return _agg(runs, extra=(*extra, "client_cpu_us") if mode == "client" else extra)


def w1_huey(tmp: Path, sz: Sizes) -> Throughput:
    import peer_huey

    runs: list[Run] = []
    pragmas: dict[str, Any] = {}
    for r in guarded_runs(sz.runs, runs, "huey enqueue"):
        wd = tmp / f"w1-huey-{r}"
        wd.mkdir(parents=True)
        db = wd / "huey.db"
        pragmas = peer_huey.storage_pragmas(str(db))
        cons = HueyConsumer(db, sz.concurrency, wd)
        try:
            res = C.run_clients(
                C.huey_enqueue_client, [(str(db), 20, sz.enqueue_seconds)] * sz.clients
            )
            s = _summarise_clients(res)
            h, _ = peer_huey.make(str(db))
            stored = _huey_settled_count(h)
            s["verified"] = stored == s["jobs"] + s["warm_jobs"]  # errors: counted apart
            s["stored"] = stored
            s["consumer_errors"] = cons.errors()
            runs.append(s)
            log(
                f"huey enqueue run {r + 1}: {s['rate']:.0f} jobs/s (stored {stored}, "
                f"errors {s['errors']}, verified {s['verified']})"
            )
        finally:
            cons.stop()
            shutil.rmtree(wd, ignore_errors=True)
    out = _agg(runs, extra=("req_p50_ms", "req_p99_ms"))
    out["pragmas"] = pragmas
    return out


def w1_aps(tmp: Path, sz: Sizes) -> Throughput:
    runs: list[Run] = []
    for r in guarded_runs(sz.runs, runs, "APScheduler add_job"):
        wd = tmp / f"w1-aps-{r}"
        wd.mkdir(parents=True)
        try:
            raw = run_aps(
                "enqueue",
                wd / "aps.db",
                {
                    "workers": sz.concurrency,
                    "clients": sz.clients,
                    "warmup": 20,
                    "duration": sz.enqueue_seconds,
                },
                timeout=300,
            )
            lat = raw.pop("lat")
            res = cast(Run, raw)  # the peer process's JSON, as its script writes it
            res["req_p50_ms"], res["req_p99_ms"] = C.pct(lat, 50) * 1000, C.pct(lat, 99) * 1000
            res["verified"] = res["stored"] == res["expected"]
            runs.append(res)
            log(
                f"APScheduler add_job run {r + 1}: {res['rate']:.0f} jobs/s "
                f"(stored {res['stored']}, verified {res['verified']})"
            )
        finally:
            shutil.rmtree(wd, ignore_errors=True)
    out = _agg(runs, extra=("req_p50_ms", "req_p99_ms"))
    out["pragmas"] = runs[-1]["pragmas"]
    return out


# -- workload 2: end to end ---------------------------------------------------------

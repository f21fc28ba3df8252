"""The typed results of ``bench_core``: what each workload returns, per system.

These shapes are what ``bench/results/bench_core-*.json`` hold, and ``--from-json`` reads
a saved file back into them unchanged: a key renamed here must stay readable there (old
files lack keys added later, so those are ``NotRequired``). ``core_report`` renders the
section of docs/benchmarks.md from them and from nothing else.

No ``from __future__ import annotations`` here: Python 3.11 reads ``NotRequired`` only
from evaluated annotations, and the tests check saved files against ``__required_keys__``.
"""

from typing import Any, NotRequired, TypedDict

from _common import Failed, Rss


class Run(TypedDict, total=False):
    """One kept run of a workload: every key a run may record. Which ones a run has depends
    on the workload and the system (the per-run lines of the report list them)."""

    # enqueue (1): client-side counts and request latency
    jobs: int
    wall: float
    rate: float
    t0: float
    t1: float
    errors: int
    warm_jobs: int
    req_p50_ms: float
    req_p99_ms: float
    stored: int
    expected: int
    client_cpu_us: float
    consumer_errors: list[str]
    pragmas: dict[str, Any]
    # end to end (2)
    enqueue_s: float
    add_seconds: float
    due_to_last: float
    late_enqueue: bool
    locked_retries: int
    attempts: int
    counts: dict[str, int]
    done: int
    complete: bool
    left: int
    n: int
    # dispatch lag (3), ms
    p50: float
    p99: float
    max: float
    exec_p50: float
    exec_p99: float
    exec_max: float
    # every workload
    daemon_cores: float
    other_cores: float
    verified: bool


class Timed(TypedDict):
    """One kept run of a workload-4 timing: the median claim time of the run (s)."""

    t: float
    other_cores: NotRequired[float]


class Throughput(TypedDict):
    """Workloads 1 and 2: the median of the runs' jobs/s, and medians of some extras."""

    rate: float
    runs: list[Run]
    verified: bool
    daemon_cores: NotRequired[float]
    req_p50_ms: NotRequired[float]
    req_p99_ms: NotRequired[float]
    client_cpu_us: NotRequired[float]
    enqueue_s: NotRequired[float]
    add_seconds: NotRequired[float]
    #: huey's and APScheduler's SQLite settings (enqueue only)
    pragmas: NotRequired[dict[str, Any]]


class Lag(TypedDict):
    """Workload 3: medians over the runs of each run's lag percentiles (ms)."""

    p50: float
    p99: float
    max: float
    exec_p50: float
    exec_p99: float
    exec_max: float
    runs: list[Run]
    verified: bool


class ClaimTimes(TypedDict):
    """Workload 4: ``claim_due(16)`` on one backlog, nothing due and 16 due (ms)."""

    none_ms: float
    few_ms: float
    none_runs_ms: list[float]
    few_runs_ms: list[float]
    other_cores: list[float]


class DaemonRss(Rss):
    """Workload 4: a daemon's memory after some status calls, claims and lists."""

    status_ms: float


class Overdue(TypedDict):
    """Workload 4: the big backlog with the clock moved past all of it."""

    status_ms: float
    promote_calls: int
    promote_batch: NotRequired[int]
    promote_p50_ms: float
    promote_max_ms: float
    drain_s: float
    steady_ms: float
    steady_runs_ms: list[float]


class Store(TypedDict):
    """Workload 4: the store in-process with growing backlogs."""

    small: ClaimTimes
    fill_rate: float
    big: ClaimTimes
    rss_empty: DaemonRss
    rss_big: DaemonRss
    overdue: Overdue
    huge_n: int
    huge_rate: float
    huge: ClaimTimes
    db_mb_per_million: float


class System(TypedDict, total=False):
    """One system's workloads (jobctl: single, batch, client, e2e, lag; the peers:
    enqueue, e2e, lag): each result, or why it failed."""

    single: Throughput | Failed
    batch: Throughput | Failed
    client: Throughput | Failed
    enqueue: Throughput | Failed
    e2e: Throughput | Failed
    lag: Lag | Failed


class StoreWorkloads(TypedDict, total=False):
    store: Store | Failed


class Results(TypedDict, total=False):
    """One run of ``bench_core``: per system, per workload."""

    jobctl: System
    huey: System
    aps: System
    w4: StoreWorkloads

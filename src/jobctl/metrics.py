"""Prometheus metrics for the daemon, and the helpers its event log lines share.

One :class:`Metrics` object per daemon holds a dedicated ``CollectorRegistry`` (never the
library's global default, so two daemons or two test engines in one process never mix
their numbers) with every metric the engine and the API update. Two kinds:

- **events**, counted where they happen (a claim starts, a finish is fenced, a schedule
  skips): counters and histograms, a few microseconds each and no I/O, so the hot paths
  stay cheap;
- **state**, read from the store at scrape time (:class:`StoreGauges`): jobs per status
  and queue, due lag, schedule lag. The store already keeps exact per-queue counts
  (trigger-maintained), so one scrape costs O(queues) reads and the gauges can never drift,
  which gauges bumped on every transition (by the API, the timer, another daemon's
  reclaim) could.

:meth:`Metrics.scrape` renders the text format for ``GET /v1/metrics`` on the Unix socket
and for the optional TCP listener (:func:`start_listener`), which serves the same bytes on
the event loop so the store reads go through the same :class:`AsyncStore` as everything
else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily, Metric

from jobctl import __version__
from jobctl.domain.clock import iso
from jobctl.domain.models import AttemptResult, Claim, Job, QueueStats
from jobctl.domain.states import JobStatus
from jobctl.errors import JobctlError
from jobctl.logfmt import direct, logval
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.metrics")

#: The classic text format: every Prometheus version reads it (jobctl's names need no
#: escaping, so the bytes are the same as the newer 1.0.0 format's).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Above this many jobs in one request, the per-job lines drop to debug behind one summary.
PER_JOB_LINES = 100
_JOB_LINE = "event=%s job=%s queue=%s run_at=%s key=%s%s"
#: Seconds a TCP client may take to send its request head.
REQUEST_TIMEOUT = 10.0

# Dispatch lag spans "claimed at once" (milliseconds) to "waited behind a backlog" (hours).
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
SIZE_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def log_jobs(
    logger: logging.Logger, event: str, jobs: Sequence[Job], request_id: str | None = None
) -> bool:
    """One ``event=<event>`` line per job; for a big batch, one summary line plus the
    per-job lines at debug.

    Why the cut-off: a line costs ~30 µs to format (~60 µs as JSON) on the event loop, so a
    10,000-job batch would stall the loop for a third of a second, and journald's default
    rate limit (10,000 lines per 30 s) would then drop lines of every kind, including the
    ``dead`` and ``fenced`` ones that matter most. The summary keeps the batch findable
    (count and id range); ``--log-level debug`` still gives each job.

    ``request_id``: the API request that made the jobs, appended to every line. Returns
    whether an INFO line was written (the audit trail then needs no line of its own).
    """
    if not jobs:
        return False
    rid = "" if request_id is None else f" request_id={request_id}"
    level = logging.INFO
    if len(jobs) > PER_JOB_LINES:
        ids = [j.id for j in jobs]
        logger.info(
            "event=%s_batch count=%d first_job=%d last_job=%d%s",
            event,
            len(jobs),
            min(ids),
            max(ids),
            rid,
        )
        level = logging.DEBUG
    if not logger.isEnabledFor(level):
        return logger.isEnabledFor(logging.INFO)
    write = direct(logger) if level == logging.INFO else None
    if write is not None:  # the same lines, without a LogRecord each (see direct)
        for job in jobs:
            write(
                _JOB_LINE
                % (event, job.id, logval(job.spec.queue), iso(job.run_at), logval(job.key), rid)
            )
        return True
    for job in jobs:
        logger.log(
            level,
            _JOB_LINE,
            event,
            job.id,
            logval(job.spec.queue),
            iso(job.run_at),
            logval(job.key),
            rid,
        )
    return True


class Metrics:
    """Every jobctl metric, on one registry; see docs/metrics.md for their meaning."""

    def __init__(self) -> None:
        # ``_created`` series double the series count and tell nothing the process start
        # time does not; the switch is process-wide, and this is the daemon's only registry.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        r = self.registry = CollectorRegistry(auto_describe=True)
        #: Labelled children, looked up once per queue (and outcome): two per attempt.
        self._started: dict[str, tuple[Counter, Histogram]] = {}
        self._finished: dict[tuple[str, str], Counter] = {}
        self.attempts_started = Counter(
            "jobctl_attempts_started", "Attempts the executor started", ["queue"], registry=r
        )
        self.attempts_finished = Counter(
            "jobctl_attempts_finished",
            "Attempts that ended, by how the command ended (fenced results included)",
            ["queue", "outcome"],
            registry=r,
        )
        self.dispatch_lag = Histogram(
            "jobctl_dispatch_lag_seconds",
            "Attempt start minus the job's run_at",
            ["queue"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.claim_duration = Histogram(
            "jobctl_claim_batch_duration_seconds",
            "Time of one claim_due store call (group commit included)",
            buckets=CLAIM_BUCKETS,
            registry=r,
        )
        self.claim_size = Histogram(
            "jobctl_claim_batch_size", "Jobs one claim returned", buckets=SIZE_BUCKETS, registry=r
        )
        self._events(r)
        self._service(r)
        # Known label values start at 0, so the first event is an increase (rate() and
        # increase() need a sample before it) rather than a series appearing out of nowhere.
        for counter, values in (
            (self.fencing_rejections, ("finish", "record", "heartbeat")),
            (self.lease_reclaims, ("expired", "restart")),
            (self.schedule_skips, ("misfire", "overlap", "paused")),
            (self.jobs_enqueued, ("api", "schedule")),
        ):
            for label in values:
                counter.labels(label)
        self.store = StoreGauges()
        r.register(self.store)

    def _events(self, r: CollectorRegistry) -> None:
        """The counters of job and schedule events (split from __init__ to stay short)."""
        self.lease_reclaims = Counter(
            "jobctl_lease_reclaims",
            "Jobs reclaimed from a lost lease: expired (timer) or restart (start-up recovery)",
            ["source"],
            registry=r,
        )
        self.fencing_rejections = Counter(
            "jobctl_fencing_rejections",
            "Attempts whose lease was lost (the store refused their generation), by the "
            "first refused call",
            ["op"],
            registry=r,
        )
        self.retries = Counter(
            "jobctl_retries", "Failed attempts whose job was scheduled again", ["queue"], registry=r
        )
        self.dead_jobs = Counter(
            "jobctl_dead_jobs", "Jobs that went dead", ["queue", "reason"], registry=r
        )
        self.replayed_jobs = Counter(
            "jobctl_replayed_jobs", "Dead jobs replayed from the DLQ", ["queue"], registry=r
        )
        self.jobs_enqueued = Counter(
            "jobctl_jobs_enqueued", "Jobs created (api or schedule)", ["source"], registry=r
        )
        self.schedule_skips = Counter(
            "jobctl_schedule_skips",
            "Schedule occurrences skipped (misfire, overlap, paused)",
            ["reason"],
            registry=r,
        )

    def _service(self, r: CollectorRegistry) -> None:
        """The daemon's own gauges and counters."""
        self.timer_ticks = Counter("jobctl_timer_ticks", "Timer passes", registry=r)
        self.slots_in_use = Gauge(
            "jobctl_executor_slots_in_use", "Executor slots held by attempts", registry=r
        )
        self.slots_total = Gauge(
            "jobctl_executor_slots", "Executor slots (concurrency)", registry=r
        )
        self.claimed_ahead = Gauge(
            "jobctl_executor_claimed_ahead",
            "Jobs claimed ahead of free slots, waiting in the executor for one (claim_ahead)",
            registry=r,
        )
        self.store_up = Gauge(
            "jobctl_store_up", "1 if the last scrape could read the store, else 0", registry=r
        )
        self.lease_waits = Gauge(
            "jobctl_lease_waits",
            "Worker lease requests waiting for work now (long-polls in flight)",
            registry=r,
        )
        self.log_bytes = Gauge(
            "jobctl_log_bytes",
            "Bytes of attempt logs on disk (sized when each attempt ended)",
            registry=r,
        )
        Info("jobctl_build", "The daemon's version", registry=r).info({"version": __version__})
        prometheus_client.ProcessCollector(registry=r)

    # -- updates from the engine (each a few µs, no I/O) -----------------------------------

    def claim_started(self, claim: Claim, now: datetime) -> None:
        queue = claim.job.spec.queue
        started = self._started.get(queue)
        if started is None:  # ``labels`` takes a lock and checks its labels: once a queue
            started = self._started[queue] = (
                self.attempts_started.labels(queue),
                self.dispatch_lag.labels(queue),
            )
        started[0].inc()
        started[1].observe(max(0.0, (now - claim.job.run_at).total_seconds()))

    def attempt_finished(self, claim: Claim, result: AttemptResult, job: Job | None) -> None:
        """Count the attempt, and the retry or death it caused (``job`` None: not stored)."""
        self.job_finished(claim.job.spec.queue, result, job)

    def job_finished(self, queue: str, result: AttemptResult, job: Job | None) -> None:
        """:meth:`attempt_finished` by queue (a worker's completion has no Claim here)."""
        if job is None:
            self.attempts_finished.labels(queue, result.outcome.value).inc()
            return
        self.finished_as(queue, result, job.status, job.dead_reason)

    def finished_as(
        self, queue: str, result: AttemptResult, status: JobStatus, dead_reason: str | None
    ) -> None:
        """:meth:`job_finished` from a finish's few fields (a batch of worker outcomes
        reads no full job)."""
        key = (queue, result.outcome.value)
        finished = self._finished.get(key)
        if finished is None:  # as in claim_started: the labelled child once per pair
            finished = self._finished[key] = self.attempts_finished.labels(*key)
        finished.inc()
        if status is JobStatus.DEAD:
            self.dead_jobs.labels(queue, dead_reason or "unknown").inc()
        elif status is JobStatus.SCHEDULED and result.outcome.uses_budget:
            self.retries.labels(queue).inc()

    def reclaimed(self, job: Job, source: str) -> None:
        self.lease_reclaims.labels(source).inc()
        if job.status is JobStatus.DEAD:
            self.dead_jobs.labels(job.spec.queue, job.dead_reason or "unknown").inc()

    def replayed(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self.replayed_jobs.labels(job.spec.queue).inc()

    # -- scraping ---------------------------------------------------------------------------

    async def scrape(self, store: AsyncStore) -> bytes:
        """Read the store-derived gauges, then render everything in the text format.

        If the store cannot be read, its gauges are left out (never shown stale) and
        ``jobctl_store_up`` is 0; the in-memory metrics are still served.
        """
        st = store.store
        try:
            stats, totals, queues, log_bytes = await asyncio.gather(
                store.run(st.stats),
                store.run(st.schedule_totals),
                store.run(st.queues),
                store.run(st.log_bytes, None),
            )
        except Exception as exc:
            log.error("event=metrics_store_failed error=%s", logval(str(exc)))
            self.store.snapshot = None
            self.store_up.set(0)
        else:
            paused = {policy.name: policy.paused for policy, _ in queues}
            self.store.snapshot = Snapshot(store.clock.now(), stats, totals, paused)
            self.log_bytes.set(log_bytes)
            self.store_up.set(1)
        return prometheus_client.generate_latest(self.registry)


@dataclass(frozen=True)
class Snapshot:
    """What one scrape read from the store."""

    now: datetime
    stats: list[QueueStats]
    schedules: dict[str, Any]  # Store.schedule_totals()
    paused: dict[str, bool]  # queue name -> paused, for queues with settings


_STATUSES = ("scheduled", "running", "succeeded", "dead", "cancelled")


class StoreGauges:
    """A collector of gauges computed from the latest :class:`Snapshot` (set by a scrape)."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None

    def describe(self) -> Iterable[Metric]:
        return _families().values()

    def collect(self) -> Iterable[Metric]:
        snap = self.snapshot
        if snap is None:
            return []
        fam = _families()
        for q in snap.stats:
            for status in _STATUSES:
                fam["jobs"].add_metric([q.queue, status], getattr(q, status))
            fam["due"].add_metric([q.queue], q.due)
            fam["lag"].add_metric([q.queue], _age(snap.now, q.oldest_due))
        for name in sorted({q.queue for q in snap.stats} | set(snap.paused)):
            fam["paused"].add_metric([name], float(snap.paused.get(name, False)))
        total, paused = snap.schedules.get("total", 0), snap.schedules.get("paused", 0)
        broken = snap.schedules.get("broken", 0)
        fam["schedules"].add_metric(["active"], total - paused - broken)
        fam["schedules"].add_metric(["paused"], paused)
        fam["schedules"].add_metric(["broken"], broken)
        fam["materializer"].add_metric([], _age(snap.now, snap.schedules.get("next_run_at")))
        return fam.values()


def _age(now: datetime, since: datetime | None) -> float:
    """Seconds ``since`` is in the past; 0 when it is absent or still ahead."""
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())


def _families() -> dict[str, GaugeMetricFamily]:
    def g(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=list(labels))

    return {
        "jobs": g("jobctl_jobs", "Jobs by status (scheduled includes due)", "queue", "status"),
        "due": g("jobctl_jobs_due", "Scheduled jobs whose run_at has passed", "queue"),
        "lag": g("jobctl_due_lag_seconds", "Age of the oldest overdue job (0: none)", "queue"),
        "paused": g("jobctl_queue_paused", "1 if the queue is paused", "queue"),
        "schedules": g("jobctl_schedules", "Schedules not deleted, by state", "state"),
        "materializer": g(
            "jobctl_materializer_lag_seconds",
            "Now minus the earliest next_run_at of active schedules (0: none overdue)",
        ),
    }


# -- the optional TCP listener ----------------------------------------------------------


class MetricsListenError(JobctlError):
    """The configured ``metrics_listen`` address cannot be bound."""

    code = "metrics_listen"


Render = Callable[[], Awaitable[bytes]]


async def start_listener(listen: str | None, render: Render) -> asyncio.Server | None:
    """Serve ``GET /metrics`` on ``listen`` ("HOST:PORT", IPv6 in brackets); None: no listener.

    A few lines of HTTP/1.0-style request/response on the event loop rather than
    prometheus_client's threaded server: the scrape must read the store through the
    daemon's AsyncStore, and a server the loop owns stops with the daemon.
    """
    if listen is None:
        return None
    host, _, port = listen.rpartition(":")
    try:
        server = await asyncio.start_server(
            lambda r, w: _serve_one(r, w, render), host.strip("[]"), int(port)
        )
    except OSError as exc:
        raise MetricsListenError(
            f"metrics_listen {listen}: cannot listen: {exc.strerror or exc}", listen=listen
        ) from None
    for sock in server.sockets:
        name = sock.getsockname()
        address = f"[{name[0]}]:{name[1]}" if ":" in name[0] else f"{name[0]}:{name[1]}"
        log.info("event=metrics_listening address=%s", address)
    return server


async def stop_listener(server: asyncio.Server | None) -> None:
    if server is None:
        return
    server.close()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1.0):
            await server.wait_closed()


async def _serve_one(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, render: Render
) -> None:
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        method, _, rest = head.decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            status, body, ctype = "405 Method Not Allowed", b"use GET\n", "text/plain"
        elif path not in ("/metrics", "/"):
            status, body, ctype = "404 Not Found", b"metrics are at /metrics\n", "text/plain"
        else:
            status, body, ctype = "200 OK", await render(), CONTENT_TYPE
        head_out = (
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        writer.write(head_out if method == "HEAD" else head_out + body)
        await writer.drain()
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass  # a client that hung up or never finished its request gets nothing
    except Exception as exc:
        log.error("event=metrics_listener_failed error=%s", logval(str(exc)))
    finally:
        writer.close()

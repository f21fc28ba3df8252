"""Metrics and event lines from the real engine (real processes, fake clock), read back
the way Prometheus and a log shipper would: the scraped text through prometheus_client's
parser, the log lines through the logfmt and JSON parsers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import Backoff, JobSpec, JobTemplate
from jobctl.domain.policies import Misfire
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import StopReason
from jobctl.logfmt import JsonFormatter, logval, parse_logfmt
from jobctl.metrics import Metrics, log_jobs, start_listener, stop_listener
from tests.engine.conftest import Engine, build_engine, close_engine, later

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def metered(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[Engine, Metrics]]:
    """The conftest engine, but with one Metrics shared by its parts as in the daemon; the
    materializer is not started, so a test decides when it runs (and sees its lag first)."""
    metrics = Metrics()
    eng = build_engine(tmp_path, clock, metrics)
    task = asyncio.get_running_loop().create_task(eng.timer.run())
    yield eng, metrics
    eng.timer.stop()
    await task
    await close_engine(eng)


async def scrape(eng: Engine, metrics: Metrics) -> Samples:
    text = (await metrics.scrape(eng.astore)).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; a KeyError (not 0) when the series is missing."""
    return samples[(name, frozenset(labels.items()))]


async def test_jobs_by_status_dispatch_lag_and_slots(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    due = later(eng.clock, 10)
    eng.add("true", run_at=due)
    eng.add("true", run_at=later(eng.clock, 3600))
    eng.clock.set(due + timedelta(seconds=2.5))  # the timer wakes 2.5 s late
    await eng.finishes(1)
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_jobs", queue="default", status="succeeded") == 1
    assert value(s, "jobctl_jobs", queue="default", status="scheduled") == 1
    assert value(s, "jobctl_jobs", queue="default", status="dead") == 0
    assert value(s, "jobctl_dispatch_lag_seconds_count", queue="default") == 1
    assert value(s, "jobctl_dispatch_lag_seconds_sum", queue="default") == 2.5
    assert value(s, "jobctl_dispatch_lag_seconds_bucket", queue="default", le="2.5") == 1
    assert value(s, "jobctl_dispatch_lag_seconds_bucket", queue="default", le="1.0") == 0
    assert value(s, "jobctl_attempts_started_total", queue="default") == 1
    assert value(s, "jobctl_attempts_finished_total", queue="default", outcome="succeeded") == 1
    assert value(s, "jobctl_claim_batch_size_sum") >= 1
    assert value(s, "jobctl_claim_batch_duration_seconds_count") >= 1
    assert value(s, "jobctl_timer_ticks_total") >= 1
    assert value(s, "jobctl_executor_slots") == 4
    assert value(s, "jobctl_store_up") == 1
    job = eng.add("sleep 30")
    await eng.started(job.id)
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_executor_slots_in_use") == 1
    assert value(s, "jobctl_jobs", queue="default", status="running") == 1
    eng.executor.stop(job.id, StopReason.CANCEL, "done with test")
    await eng.finishes(2)


async def test_due_lag_of_a_paused_queue(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    eng.store.set_queue(QueuePolicy("held", paused=True))
    eng.add("true", queue="held")
    eng.clock.advance(42)
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_due_lag_seconds", queue="held") == 42
    assert value(s, "jobctl_jobs_due", queue="held") == 1
    assert value(s, "jobctl_queue_paused", queue="held") == 1


async def test_retries_and_dead_jobs_are_counted(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    job = eng.add("exit 3", max_attempts=2, backoff=Backoff(60, 60))
    await eng.finishes(1)
    eng.clock.set(eng.store.get(job.id).run_at)
    await eng.finishes(2)
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_retries_total", queue="default") == 1
    assert value(s, "jobctl_dead_jobs_total", queue="default", reason="max_attempts") == 1
    assert value(s, "jobctl_attempts_finished_total", queue="default", outcome="failed") == 2
    assert value(s, "jobctl_jobs", queue="default", status="dead") == 1


async def test_lost_lease_counts_fencing_rejections(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    job = eng.add("sleep 30", max_attempts=3)
    await eng.started(job.id)
    eng.store.reclaim(job.id, eng.store.get(job.id).generation, "reclaimed elsewhere")
    await eng.executor.heartbeat_once()  # refused: stops the command
    await eng.finishes(1)  # its result is refused too: one fenced attempt, found at heartbeat
    assert eng.finished[0][0] is None
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_fencing_rejections_total", op="heartbeat") == 1
    assert value(s, "jobctl_fencing_rejections_total", op="finish") == 0
    assert value(s, "jobctl_attempts_finished_total", queue="default", outcome="cancelled") == 1


async def test_a_result_refused_at_finish_is_fenced(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    gate = eng.tmp / "gate"
    job = eng.add(f"while [ ! -e {gate} ]; do sleep 0.01; done", max_attempts=3)
    await eng.started(job.id)
    eng.store.reclaim(job.id, eng.store.get(job.id).generation, "reclaimed elsewhere")
    gate.touch()  # the command ends on its own, before any heartbeat noticed
    await eng.finishes(1)
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_fencing_rejections_total", op="finish") == 1
    assert value(s, "jobctl_fencing_rejections_total", op="heartbeat") == 0


async def test_a_cancel_is_not_a_fencing_rejection(
    metered: tuple[Engine, Metrics], caplog: pytest.LogCaptureFixture
) -> None:
    eng, metrics = metered
    caplog.set_level(logging.INFO, logger="jobctl")
    job = eng.add("sleep 30")
    await eng.started(job.id)
    assert eng.store.cancel(job.id, "cancelled by user").was_running
    await eng.executor.heartbeat_once()  # a heartbeat racing the stop finds no lease either
    eng.executor.stop(job.id, StopReason.CANCEL)
    await eng.finishes(1)
    s = await scrape(eng, metrics)
    assert sum(v for (name, _), v in s.items() if name == "jobctl_fencing_rejections_total") == 0
    assert value(s, "jobctl_jobs", queue="default", status="cancelled") == 1
    assert f"event=cancelled job={job.id} " in caplog.text
    assert "event=fenced" not in caplog.text


async def test_expired_lease_reclaim_is_counted(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    [ins] = eng.store.insert([JobSpec(("true",), eng.clock.now(), os.geteuid(), max_attempts=1)])
    [claim] = eng.store.claim_due("otherhost:9:dead", 1, 30)  # a daemon that then vanished
    eng.clock.advance(31)
    await eng.timer.run_once()
    s = await scrape(eng, metrics)
    assert claim.job.id == ins.job.id
    assert value(s, "jobctl_lease_reclaims_total", source="expired") == 1
    assert value(s, "jobctl_dead_jobs_total", queue="default", reason="lease_expired") == 1


async def test_misfire_skips_and_materializer_lag(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    template = JobTemplate(("true",), cwd=str(eng.tmp), max_attempts=1)
    spec = ScheduleSpec(
        Timing("UTC", cron="*/5 * * * *"), Policy(misfire=Misfire.SKIP), template, os.geteuid()
    )
    sched = eng.store.create_schedule(spec)
    eng.clock.set(sched.next_run_at + timedelta(hours=1, seconds=30))  # the host slept
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_materializer_lag_seconds") == 3630
    assert value(s, "jobctl_schedules", state="active") == 1
    await eng.materializer.run_once()
    skipped = eng.store.get_schedule(sched.id).misfire_skips
    assert skipped > 0
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_schedule_skips_total", reason="misfire") == skipped
    assert value(s, "jobctl_materializer_lag_seconds") == 0


async def test_store_gauges_are_dropped_when_the_store_fails(
    metered: tuple[Engine, Metrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    eng, metrics = metered
    eng.add("true", run_at=later(eng.clock, 60))
    assert value(await scrape(eng, metrics), "jobctl_store_up") == 1

    def broken() -> None:
        raise OSError("disk I/O error")

    monkeypatch.setattr(eng.store, "stats", broken)
    s = await scrape(eng, metrics)
    assert value(s, "jobctl_store_up") == 0
    assert not [key for key in s if key[0] == "jobctl_jobs"]  # absent, never stale
    assert value(s, "jobctl_timer_ticks_total") >= 1  # the rest is still served


async def test_event_lines_parse_as_logfmt_and_json(
    metered: tuple[Engine, Metrics], caplog: pytest.LogCaptureFixture
) -> None:
    eng, _ = metered
    caplog.set_level(logging.INFO, logger="jobctl")
    job = eng.add("exit 3", max_attempts=1, key="nightly report = 'q'", queue="two words")
    await eng.finishes(1)
    lines = [r for r in caplog.records if r.getMessage().startswith("event=")]
    by_event = {}
    for record in lines:
        fields = parse_logfmt(record.getMessage())
        assert fields is not None, record.getMessage()
        assert json.loads(JsonFormatter().format(record))["event"] == fields["event"]
        by_event[fields["event"]] = fields
    started, dead = by_event["started"], by_event["dead"]
    assert (started["job"], started["key"], started["queue"]) == (job.id, job.key, "two words")
    assert (dead["job"], dead["error"], dead["reason"]) == (job.id, "exit code 3", "max_attempts")


@pytest.mark.parametrize(
    "text", ["plain", "two words", 'say "hi"', "it's", "a=b", "back\\slash", "line\nbreak", "", "é"]
)
def test_logval_round_trips_through_the_logfmt_parser(text: str) -> None:
    assert parse_logfmt(f"event=x value={logval(text)} after=1") == {
        "event": "x",
        "value": text,
        "after": 1,
    }


async def test_big_batches_log_a_summary_and_per_job_lines_at_debug(
    metered: tuple[Engine, Metrics], caplog: pytest.LogCaptureFixture
) -> None:
    eng, _ = metered
    caplog.set_level(logging.DEBUG, logger="jobctl")
    log = logging.getLogger("jobctl.api")
    specs = [JobSpec(("true",), later(eng.clock, 60), os.geteuid()) for _ in range(101)]
    jobs = [i.job for i in eng.store.insert(specs)]
    log_jobs(log, "enqueued", jobs[:3])
    records = [r for r in caplog.records if r.name == "jobctl.api"]
    small = [(r.levelno, parse_logfmt(r.getMessage())) for r in records]
    assert [(level, (fields or {}).get("job")) for level, fields in small] == [
        (logging.INFO, j.id) for j in jobs[:3]
    ]
    caplog.clear()
    log_jobs(log, "enqueued", jobs)
    [summary, *each] = [r for r in caplog.records if r.name == "jobctl.api"]
    assert summary.levelno == logging.INFO
    assert parse_logfmt(summary.getMessage()) == {
        "event": "enqueued_batch",
        "count": 101,
        "first_job": jobs[0].id,
        "last_job": jobs[-1].id,
    }
    assert {r.levelno for r in each} == {logging.DEBUG} and len(each) == 101


async def test_tcp_listener_serves_metrics_only(metered: tuple[Engine, Metrics]) -> None:
    eng, metrics = metered
    server = await start_listener("127.0.0.1:0", lambda: metrics.scrape(eng.astore))
    assert server is not None
    port = server.sockets[0].getsockname()[1]
    try:
        ok = await _get(port, "GET /metrics?x=1 HTTP/1.1")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Content-Type: text/plain; version=0.0.4" in ok
        assert b"\r\n\r\n# HELP " in ok and b"jobctl_timer_ticks_total" in ok
        assert (await _get(port, "GET /v1/jobs HTTP/1.1")).startswith(b"HTTP/1.1 404")
        assert (await _get(port, "POST /metrics HTTP/1.1")).startswith(b"HTTP/1.1 405")
        head = await _get(port, "HEAD /metrics HTTP/1.1")
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    finally:
        await stop_listener(server)
    assert await start_listener(None, lambda: metrics.scrape(eng.astore)) is None


async def _get(port: int, request_line: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{request_line}\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()  # the server closes the connection after one answer
    writer.close()
    return data

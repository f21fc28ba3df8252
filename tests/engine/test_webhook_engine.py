"""Webhook jobs in the engine (issue 16): a real receiver on 127.0.0.1, the real httpx
client, a real SQLite file; the fake clock moves retries along. The engine's config
allows 127.0.0.0/8 explicitly (it is refused by default: the last test)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobctl import webhooks
from jobctl.domain.clock import FakeClock
from jobctl.domain.http import HttpRequest
from jobctl.domain.models import Backoff, Job, JobSpec
from jobctl.domain.netguard import NetGuard, parse_networks
from jobctl.domain.states import JobStatus, Outcome, StopReason
from jobctl.engine.webhook import WebhookConfig
from jobctl.errors import WebhookUnverified
from tests.engine.conftest import Engine, build_engine, close_engine
from tests.webhooks.receiver import Answer, receiving

LOOPBACK = WebhookConfig(NetGuard(parse_networks("127.0.0.0/8")))
FAST = Backoff(0.001, 0.001)


_TASKS: dict[int, list[asyncio.Task[None]]] = {}


async def _running(tmp_path: Path, clock: FakeClock, cfg: WebhookConfig) -> Engine:
    eng = build_engine(tmp_path, clock, webhooks=cfg)
    loop = asyncio.get_running_loop()
    _TASKS[id(eng)] = [loop.create_task(eng.timer.run()), loop.create_task(eng.materializer.run())]
    return eng


async def _stop(eng: Engine) -> None:
    eng.timer.stop()
    eng.materializer.stop()
    await asyncio.gather(*_TASKS.pop(id(eng)))
    await close_engine(eng)


@pytest.fixture
async def hooks(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    eng = await _running(tmp_path, clock, LOOPBACK)
    yield eng
    await _stop(eng)


def add_http(eng: Engine, url: str, body: str = '{"n": 1}', **kw: Any) -> Job:
    req = kw.pop("request", {})
    spec = JobSpec(
        command=(),
        http=HttpRequest("POST", url + "/hook?x=1", body=body, **req),
        run_at=eng.clock.now(),
        owner_uid=os.geteuid(),
        **({"backoff": FAST} | kw),
    )
    [ins] = eng.store.insert([spec])
    eng.timer.wake()
    return ins.job


async def next_attempt(eng: Engine, job_id: int, count: int) -> None:
    """Move the clock past the job's retry time and wait for its ``count``-th finish."""
    eng.clock.set(max(eng.clock.now(), eng.store.get(job_id).run_at) + timedelta(seconds=1))
    eng.timer.wake()
    await eng.finishes(count)


async def test_a_2xx_succeeds_signed_with_the_owners_secret(hooks: Engine) -> None:
    secret = hooks.store.secrets.create_secret(os.geteuid(), "default", webhooks.new_secret())
    async with receiving(Answer(200, b"thanks")) as rec:
        job = add_http(hooks, rec.url, key="order-7")
        [result] = await hooks.finishes(1)
    assert result.outcome is Outcome.SUCCEEDED
    [seen] = rec.seen
    assert (seen.method, seen.path, seen.body) == ("POST", "/hook?x=1", b'{"n": 1}')
    assert seen.headers["host"] == f"127.0.0.1:{rec.port}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["webhook-id"] == "order-7"
    assert seen.headers["x-jobctl-job-id"] == str(job.id)
    assert (seen.headers["x-jobctl-attempt"], seen.headers["x-jobctl-generation"]) == ("1", "1")
    ts = int(seen.headers["webhook-timestamp"])
    assert ts == int(hooks.clock.now().timestamp())
    webhooks.verify(secret.secret, seen.headers, seen.body, now=ts)
    done = hooks.store.get(job.id)
    assert done.status is JobStatus.SUCCEEDED
    [attempt] = done.attempts
    assert attempt.http_status == 200 and attempt.output_tail == "thanks"
    assert attempt.body_sha256 == hashlib.sha256(seen.body).hexdigest()
    assert attempt.latency_ms is not None and attempt.latency_ms >= 0


async def test_a_500_is_retried_with_the_same_webhook_id_then_succeeds(hooks: Engine) -> None:
    async with receiving(Answer(500, b"oops"), Answer(204, b"")) as rec:
        job = add_http(hooks, rec.url, max_attempts=3)
        await hooks.finishes(1)
        after = hooks.store.get(job.id)
        assert after.status is JobStatus.SCHEDULED and after.last_error == "HTTP 500"
        await next_attempt(hooks, job.id, 2)
    first, second = rec.seen
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == job.key
    assert [s.headers["x-jobctl-attempt"] for s in rec.seen] == ["1", "2"]
    assert "webhook-signature" not in first.headers  # no secret: sent unsigned
    done = hooks.store.get(job.id)
    assert done.status is JobStatus.SUCCEEDED
    assert [a.http_status for a in done.attempts] == [500, 204]
    assert done.attempts[0].output_tail == "oops"


async def test_retry_after_sets_the_earliest_retry(hooks: Engine) -> None:
    async with receiving(Answer(503, b"", (("Retry-After", "120"),))) as rec:
        job = add_http(hooks, rec.url)
        await hooks.finishes(1)
    after = hooks.store.get(job.id)
    assert after.status is JobStatus.SCHEDULED
    assert after.run_at >= hooks.clock.now() + timedelta(seconds=120)
    assert after.run_at <= hooks.clock.now() + timedelta(seconds=121)
    assert len(rec.seen) == 1


async def test_a_redirect_is_a_failure_and_is_not_followed(hooks: Engine) -> None:
    async with receiving(Answer(302, b"", (("Location", "/elsewhere"),))) as rec:
        job = add_http(hooks, rec.url, max_attempts=1)
        [result] = await hooks.finishes(1)
    assert result.outcome is Outcome.FAILED and "redirects are not followed" in str(result.error)
    assert [s.path for s in rec.seen] == ["/hook?x=1"]
    assert hooks.store.get(job.id).status is JobStatus.DEAD


async def test_a_slow_receiver_times_out(hooks: Engine) -> None:
    async with receiving(Answer(200, b"late", delay=-1)) as rec:
        job = add_http(hooks, rec.url, timeout=0.2, max_attempts=1)
        [result] = await hooks.finishes(1)
    assert result.outcome is Outcome.TIMEOUT and "timed out after 0.2s" in str(result.error)
    assert len(rec.seen) == 1
    after = hooks.store.get(job.id)
    assert after.status is JobStatus.DEAD and after.dead_reason == "timeout"


async def test_410_is_dead_at_once(hooks: Engine) -> None:
    async with receiving(Answer(410, b"gone")) as rec:
        job = add_http(hooks, rec.url, max_attempts=5)
        await hooks.finishes(1)
    after = hooks.store.get(job.id)
    assert (after.status, after.dead_reason) == (JobStatus.DEAD, "non_retryable")
    assert len(rec.seen) == 1 and after.attempts[0].http_status == 410


async def test_a_4xx_is_dead_unless_listed_in_retry_on(hooks: Engine) -> None:
    async with receiving(Answer(404, b"")) as rec:
        dead = add_http(hooks, rec.url, max_attempts=5)
        await hooks.finishes(1)
        retried = add_http(hooks, rec.url, max_attempts=5, request={"retry_on": (404,)})
        await hooks.finishes(2)
    assert hooks.store.get(dead.id).dead_reason == "non_retryable"
    assert hooks.store.get(retried.id).status is JobStatus.SCHEDULED
    assert len(rec.seen) == 2


async def test_a_named_secret_that_does_not_exist_is_dead_unsent(hooks: Engine) -> None:
    async with receiving() as rec:
        job = add_http(hooks, rec.url, request={"secret": "nope"})
        [result] = await hooks.finishes(1)
    assert "has no secret 'nope'" in str(result.error)
    assert hooks.store.get(job.id).dead_reason == "non_retryable" and not rec.seen


async def test_a_stale_generation_cannot_complete(hooks: Engine) -> None:
    """Attempt 1 is held by the receiver while its lease is reclaimed and attempt 2 (a
    new generation) succeeds; attempt 1's late 200 is then refused by the fence."""
    async with receiving(Answer(200, b"late", delay=-1), Answer(200, b"second")) as rec:
        job = add_http(hooks, rec.url, max_attempts=3)
        await rec.requests(1)
        hooks.store.reclaim(job.id, 1, "lease expired (test)")
        hooks.clock.advance(5)
        hooks.timer.wake()
        await rec.requests(2)
        await hooks.finishes(1)  # attempt 2 succeeded
        rec.release.set()
        await hooks.finishes(2)  # attempt 1's answer, fenced
    stale_job, stale_claim, _ = hooks.finished[1]
    assert stale_job is None and stale_claim.generation == 1
    done = hooks.store.get(job.id)
    assert done.status is JobStatus.SUCCEEDED and done.generation == 2
    first, second = done.attempts
    assert first.outcome is Outcome.LEASE_EXPIRED and first.http_status is None
    assert second.http_status == 200 and second.output_tail == "second"


async def test_loopback_is_refused_by_default(tmp_path: Path, clock: FakeClock) -> None:
    eng = await _running(tmp_path, clock, WebhookConfig())
    try:
        async with receiving() as rec:
            job = add_http(eng, rec.url, max_attempts=5)
            [result] = await eng.finishes(1)
    finally:
        await _stop(eng)
    assert "127.0.0.1 is loopback" in str(result.error) and not rec.seen
    assert eng.store.get(job.id).dead_reason == "non_retryable"


async def test_cancelling_a_running_http_job_stops_its_call(hooks: Engine) -> None:
    async with receiving(Answer(200, delay=-1)) as rec:
        job = add_http(hooks, rec.url)
        await rec.requests(1)
        hooks.store.cancel(job.id, "by test")
        assert hooks.executor.stop(job.id, StopReason.CANCEL)
        [result] = await hooks.finishes(1)
    assert result.outcome is Outcome.CANCELLED
    assert hooks.store.get(job.id).status is JobStatus.CANCELLED


async def test_a_rotated_secret_signs_twice_during_its_grace(hooks: Engine) -> None:
    uid = os.geteuid()
    old = hooks.store.secrets.create_secret(uid, "rot", webhooks.new_secret())
    new = hooks.store.secrets.rotate_secret(uid, "rot", webhooks.new_secret(), 60_000)
    async with receiving() as rec:
        add_http(hooks, rec.url, request={"secret": "rot"})
        await hooks.finishes(1)
        hooks.clock.advance(61)  # the grace is over: the new secret alone
        add_http(hooks, rec.url, request={"secret": "rot"})
        await hooks.finishes(2)
    during, after = rec.seen
    assert len(during.headers["webhook-signature"].split()) == 2
    assert len(after.headers["webhook-signature"].split()) == 1
    ts = int(during.headers["webhook-timestamp"])
    for secret in (old.secret, new.secret):
        webhooks.verify(secret, during.headers, during.body, now=ts)
    with pytest.raises(WebhookUnverified):
        webhooks.verify(old.secret, after.headers, after.body, now=ts + 61)


async def test_the_per_target_limit_holds_a_burst_back(tmp_path: Path, clock: FakeClock) -> None:
    eng = await _running(tmp_path, clock, replace(LOOPBACK, per_target=1))
    try:
        async with receiving(Answer(200, delay=-1)) as rec:
            add_http(eng, rec.url)
            add_http(eng, rec.url)
            await rec.requests(1)
            for _ in range(20):  # both jobs are running; the second waits for the first
                await asyncio.sleep(0.01)
            assert len(rec.seen) == 1 and eng.executor.running_count == 2
            rec.release.set()
            await rec.requests(2)
            await eng.finishes(2)
    finally:
        await _stop(eng)


async def test_a_name_is_resolved_once_and_kept_in_the_host_header(
    hooks: Engine, tmp_path: Path, clock: FakeClock
) -> None:
    """The request goes to the address checked (here localhost's 127.0.0.1, allowed),
    with the name kept for Host; a daemon at its defaults refuses the name by what it
    resolves to, so a name cannot smuggle a request to loopback."""
    async with receiving() as rec:
        add_http(hooks, f"http://localhost:{rec.port}")
        [result] = await hooks.finishes(1)
    assert result.outcome is Outcome.SUCCEEDED
    assert rec.seen[0].headers["host"] == f"localhost:{rec.port}"
    eng = await _running(tmp_path / "strict", clock, WebhookConfig())
    try:
        async with receiving() as rec:
            add_http(eng, f"http://localhost:{rec.port}")
            [refused] = await eng.finishes(1)
    finally:
        await _stop(eng)
    assert "localhost resolves to" in str(refused.error) and "loopback" in str(refused.error)
    assert not rec.seen


async def test_a_job_signs_only_with_its_owners_secrets(hooks: Engine) -> None:
    hooks.store.secrets.create_secret(os.geteuid() + 1, "theirs", webhooks.new_secret())
    async with receiving() as rec:
        add_http(hooks, rec.url, request={"secret": "theirs"})
        [result] = await hooks.finishes(1)
    assert "has no secret 'theirs'" in str(result.error) and not rec.seen

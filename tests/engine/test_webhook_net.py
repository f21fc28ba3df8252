"""Webhook jobs over IPv6 and TLS (issue 16): a real receiver on ``[::1]`` and a real
https receiver with a certificate from a throwaway authority the daemon trusts through
``SSL_CERT_FILE``; the engine on a real SQLite file, a fake clock."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.netguard import NetGuard, parse_networks
from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine.httpclient import request_bytes
from jobctl.engine.httppool import TargetPools
from jobctl.engine.webhook import WebhookConfig
from tests.engine.conftest import Engine
from tests.engine.test_webhook_engine import LOOPBACK, _running, _stop, add_http
from tests.webhooks.receiver import Answer, receiving
from tests.webhooks.tls import Certs, make_certs

LOCAL = ipaddress.ip_address("127.0.0.1")


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")


@pytest.fixture
async def v6(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    eng = await _running(tmp_path, clock, WebhookConfig(NetGuard(parse_networks("::1/128"))))
    yield eng
    await _stop(eng)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@needs_ipv6
async def test_an_ipv6_literal_is_sent_to_that_address(v6: Engine) -> None:
    async with receiving(Answer(200, b"v6"), host="::1") as rec:
        job = add_http(v6, rec.url)
        [result] = await v6.finishes(1)
    assert result.outcome is Outcome.SUCCEEDED, result.error
    [seen] = rec.seen
    assert seen.headers["host"] == f"[::1]:{rec.port}" and seen.path == "/hook?x=1"
    assert v6.store.get(job.id).attempts[0].output_tail == "v6"


async def test_ipv6_loopback_is_refused_by_default(tmp_path: Path, clock: FakeClock) -> None:
    eng = await _running(tmp_path, clock, WebhookConfig())
    try:
        job = add_http(eng, "http://[::1]:8080", max_attempts=5)
        [result] = await eng.finishes(1)
        mapped = add_http(eng, "http://[::ffff:127.0.0.1]:8080", max_attempts=5)
        [_, again] = await eng.finishes(2)
    finally:
        await _stop(eng)
    assert "::1 is loopback" in str(result.error), result.error
    assert "127.0.0.1 is loopback" in str(again.error), again.error
    for refused in (job, mapped):
        assert eng.store.get(refused.id).dead_reason == "non_retryable"


async def test_https_is_verified_against_a_trusted_authority(
    tmp_path: Path, clock: FakeClock, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is resolved once (localhost → 127.0.0.1, allowed) and the connection
    goes to that address with the name in SNI and the certificate check."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    eng = await _running(tmp_path, clock, LOOPBACK)
    try:
        async with receiving(Answer(201, b"secure"), tls=certs.server_context()) as rec:
            job = add_http(eng, f"https://localhost:{rec.port}")
            [result] = await eng.finishes(1)
    finally:
        await _stop(eng)
    assert result.outcome is Outcome.SUCCEEDED, result.error
    assert rec.seen[0].headers["host"] == f"localhost:{rec.port}"
    done = eng.store.get(job.id)
    assert done.status is JobStatus.SUCCEEDED and done.attempts[0].output_tail == "secure"


@pytest.mark.parametrize(
    ("trusted", "host", "why"),
    [
        (False, "localhost", "certificate verify failed"),  # an authority nobody trusts
        (True, "127.0.0.1", "IP address mismatch"),  # a certificate for another name
    ],
)
async def test_a_bad_certificate_is_a_failed_attempt_with_its_reason(
    tmp_path: Path,
    clock: FakeClock,
    certs: Certs,
    monkeypatch: pytest.MonkeyPatch,
    trusted: bool,
    host: str,
    why: str,
) -> None:
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-dir"))
    eng = await _running(tmp_path, clock, LOOPBACK)
    try:
        async with receiving(tls=certs.server_context()) as rec:
            job = add_http(eng, f"https://{host}:{rec.port}", max_attempts=3)
            [result] = await eng.finishes(1)
    finally:
        await _stop(eng)
    assert result.outcome is Outcome.FAILED and why in str(result.error), result.error
    assert "SSLCertVerificationError" in str(result.error) and not rec.seen
    after = eng.store.get(job.id)
    assert after.status is JobStatus.SCHEDULED  # retried: the receiver may mend it


def test_the_client_works_on_uvloop_the_daemons_loop(
    certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon runs on uvloop (its transports are not asyncio.Transport subclasses):
    plain and TLS exchanges, a refused certificate and a read timeout, on that loop."""
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    body = request_bytes("POST", "/hook", "localhost", {}, b"{}")

    async def scenario() -> None:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        pools = TargetPools(5.0)
        async with receiving(Answer(200, b"plain")) as rec:
            answer = await pools.exchange(("http", "localhost", rec.port, LOCAL), body)
            assert (answer.status, answer.tail) == (200, "plain")
        async with receiving(Answer(202, b"tls"), tls=certs.server_context()) as rec:
            answer = await pools.exchange(("https", "localhost", rec.port, LOCAL), body)
            assert (answer.status, answer.tail) == (202, "tls")
            with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
                await pools.exchange(("https", "127.0.0.1", rec.port, LOCAL), body)
        slow = TargetPools(0.2)
        async with receiving(Answer(200, delay=-1)) as rec:
            with pytest.raises(TimeoutError):
                await slow.exchange(("http", "localhost", rec.port, LOCAL), body)
        await pools.close()
        await slow.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())

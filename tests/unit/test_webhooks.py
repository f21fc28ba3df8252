"""Standard Webhooks v1 signing (jobctl.webhooks) against the reference library
(``standardwebhooks`` from PyPI, in the test extra), the address guard and the status
rules of webhook jobs."""

from __future__ import annotations

import base64
import ipaddress

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from jobctl import webhooks
from jobctl.domain.http import WebhookSecret, classify, retry_after_seconds
from jobctl.domain.netguard import NetGuard, parse_networks
from jobctl.errors import WebhookUnverified

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
NEW = "whsec_" + base64.b64encode(bytes(range(32, 64))).decode()
BODY = b'{"event":"run","n":1}'
TS = 1_900_000_000


def _headers(*secrets: str, body: bytes = BODY, ts: int = TS) -> dict[str, str]:
    return webhooks.sign(secrets, "job-key-1", ts, body)


def _reference(secret: str, headers: dict[str, str], body: bytes, now: int) -> None:
    """The reference library's verdict at ``now`` (it reads the wall clock itself, so its
    module's ``datetime`` is swapped for one whose ``now`` is the vector's time)."""
    import standardwebhooks.webhooks as ref

    real = getattr(ref, "datetime")  # noqa: B009 - not an exported name
    fixed = classmethod(lambda cls, tz=None: real.fromtimestamp(now, tz))
    try:
        setattr(ref, "datetime", type("Fixed", (real,), {"now": fixed}))  # noqa: B010
        Webhook(secret).verify(body, headers)
    finally:
        setattr(ref, "datetime", real)  # noqa: B010


def test_the_reference_library_accepts_our_signature() -> None:
    _reference(SECRET, _headers(SECRET), BODY, TS)
    webhooks.verify(SECRET, _headers(SECRET), BODY, now=TS)


def test_a_pinned_vector_keeps_its_signature() -> None:
    sig = webhooks.signature(SECRET, "job-key-1", TS, BODY)
    assert sig == webhooks.signature(SECRET, "job-key-1", TS, bytes(BODY))
    assert sig.startswith("v1,") and len(base64.b64decode(sig[3:])) == 32


@pytest.mark.parametrize(
    "change",
    ["body", "late", "early", "missing", "prefix"],
)
def test_both_verifiers_reject_a_changed_request(change: str) -> None:
    headers, body, now = _headers(SECRET), BODY, TS
    if change == "body":
        body = BODY[:-1] + b"2"
    elif change == "late":
        now = TS + 301
    elif change == "early":
        now = TS - 301
    elif change == "missing":
        del headers["webhook-timestamp"]
    else:
        headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v2,")
    with pytest.raises(WebhookVerificationError):
        _reference(SECRET, headers, body, now)
    with pytest.raises(WebhookUnverified):
        webhooks.verify(SECRET, headers, body, now=now)


def test_during_a_rotation_both_secrets_verify() -> None:
    headers = _headers(NEW, SECRET)
    assert len(headers["webhook-signature"].split()) == 2
    for secret in (NEW, SECRET):
        _reference(secret, headers, BODY, TS)
        webhooks.verify(secret, headers, BODY, now=TS)
    other = webhooks.new_secret()
    with pytest.raises(WebhookUnverified):
        webhooks.verify(other, headers, BODY, now=TS)


def test_a_new_secret_is_32_random_bytes() -> None:
    a, b = webhooks.new_secret(), webhooks.new_secret()
    assert a != b and a.startswith("whsec_") and len(webhooks.secret_key(a)) == 32


def test_the_previous_secret_signs_until_its_grace_ends() -> None:
    s = WebhookSecret(1, "default", NEW, 0, 10, SECRET, 1000)
    assert s.signing(999) == [NEW, SECRET] and s.signing(1000) == [NEW]
    assert "secret" not in s.info() and SECRET not in str(s.info())


@pytest.mark.parametrize(
    ("status", "ok", "retry"),
    [(200, True, False), (204, True, False), (301, False, True), (404, False, False),
     (409, False, True), (410, False, False), (429, False, True), (500, False, True),
     (503, False, True)],
)  # fmt: skip
def test_statuses_map_to_the_jobs_fate(status: int, ok: bool, retry: bool) -> None:
    verdict = classify(status, (409,), None)
    assert (verdict.ok, verdict.retry) == (ok, retry)


def test_retry_after_is_bounded_and_dates_are_ignored() -> None:
    assert retry_after_seconds("30") == 30.0
    assert retry_after_seconds("99999999") == 3600.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_seconds("-1") is None and retry_after_seconds(None) is None


@pytest.mark.parametrize(
    ("ip", "refused"),
    [("127.0.0.1", "loopback"), ("::1", "loopback"), ("169.254.169.254", "link-local"),
     ("fe80::1", "link-local"), ("10.1.2.3", "private"), ("192.168.1.1", "private"),
     ("100.64.0.1", "CGNAT"), ("0.0.0.0", "unspecified"), ("::ffff:127.0.0.1", "loopback"),
     ("fd00::1", "unique-local"), ("93.184.216.34", None)],
)  # fmt: skip
def test_the_guard_refuses_internal_addresses_by_default(ip: str, refused: str | None) -> None:
    why = NetGuard().refusal(ipaddress.ip_address(ip), 80)
    assert (why is None) if refused is None else (refused in str(why))


def test_an_admin_allows_a_network_but_never_the_daemons_listener() -> None:
    lo = ipaddress.ip_address("127.0.0.1")
    guard = NetGuard(parse_networks("127.0.0.0/8, 10.0.0.0/8"), listeners=frozenset({(lo, 9464)}))
    assert guard.refusal(lo, 8080) is None
    assert "own listener" in str(guard.refusal(lo, 9464))
    assert guard.refusal(ipaddress.ip_address("10.9.9.9"), 80) is None
    own = NetGuard(own=frozenset({ipaddress.ip_address("93.184.216.34")}))
    assert "own addresses" in str(own.refusal(ipaddress.ip_address("93.184.216.34"), 80))

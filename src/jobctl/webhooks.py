"""Standard Webhooks v1 signatures: what the daemon signs webhook jobs with, and what a
receiver verifies them with (docs/webhooks.md).

The signed content is ``f"{id}.{timestamp}."`` followed by the exact body bytes sent;
the signature is ``v1,`` + base64(HMAC-SHA256(key, content)), where the key is the
base64-decoded part of a ``whsec_`` secret. During a rotation's grace period a request
carries two signatures, space-separated; a receiver accepts any one that matches.

Receivers::

    from jobctl.webhooks import verify, WebhookVerificationError
    try:
        verify(secret, request.headers, raw_body)   # raises on a bad request
    except WebhookVerificationError:
        return 400
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Iterable, Mapping

from jobctl.errors import WebhookUnverified

PREFIX = "whsec_"
#: Seconds a timestamp may be off (either way), as the reference library.
TOLERANCE = 300
SECRET_BYTES = 32


#: A request whose signature, timestamp or headers do not verify (jobctl.errors).
WebhookVerificationError = WebhookUnverified


def new_secret() -> str:
    """A fresh secret: ``whsec_`` + base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (its decoded bytes)."""
    text = secret[len(PREFIX) :] if secret.startswith(PREFIX) else secret
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the secret is not whsec_ + base64") from None


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>`` over ``id.timestamp.body``."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def sign(secrets: Iterable[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three ``webhook-*`` headers, one signature per secret (the newest first)."""
    sigs = " ".join(signature(s, msg_id, timestamp, body) for s in secrets)
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp)}
    if sigs:
        headers["webhook-signature"] = sigs
    return headers


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: float | None = None) -> None:
    """Raise :class:`WebhookVerificationError` unless ``body`` with ``headers`` carries a
    valid signature by ``secret`` and a timestamp within :data:`TOLERANCE` seconds of
    ``now`` (the wall clock when not given). Header names are matched case-blind."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, ts_text, sigs = (lower[h] for h in _NAMES)
    except KeyError:
        raise WebhookVerificationError("missing webhook-id/-timestamp/-signature") from None
    try:
        ts = int(ts_text)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    clock = time.time() if now is None else now
    if abs(clock - ts) > TOLERANCE:
        raise WebhookVerificationError(f"webhook-timestamp is over {TOLERANCE}s off")
    expected = signature(secret, msg_id, ts, body).encode()
    for sig in sigs.split():
        if sig.startswith("v1,") and hmac.compare_digest(sig.encode(), expected):
            return
    raise WebhookVerificationError("no signature matches")


_NAMES = ("webhook-id", "webhook-timestamp", "webhook-signature")

__all__ = [
    "TOLERANCE",
    "WebhookVerificationError",
    "new_secret",
    "secret_key",
    "sign",
    "signature",
    "verify",
]

"""The HTTP request of a webhook job (issue 16): what the daemon sends instead of running a
command, checked and stored (``jobs.http``, one JSON object, NULL for a command job).

Pure: no I/O. The engine's runner (engine/webhook.py) sends it, signs it
(:mod:`jobctl.webhooks`) and maps the answer to an attempt result
(:func:`jobctl.domain.http.classify`).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from jobctl.domain.limits import MAX_PAYLOAD_BYTES, clean_text
from jobctl.errors import InvalidInput

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MAX_URL = 2048
MAX_HEADERS = 32
MAX_HEADER_VALUE = 4096
#: A header name: an RFC 9110 token.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
#: Headers the daemon sets itself: a job may not set or fake them.
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "webhook-id",
     "webhook-timestamp", "webhook-signature", "x-jobctl-job-id", "x-jobctl-attempt",
     "x-jobctl-generation"}
)  # fmt: skip
#: A secret's name (``jobctl secrets``), the same rule as a header token but shorter.
SECRET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_SECRET = "default"
#: Seconds to connect and to wait for each read when the job sets no ``timeout``.
DEFAULT_TIMEOUT = 15.0
#: The longest ``Retry-After`` honoured (seconds): a receiver cannot park a job for days.
MAX_RETRY_AFTER = 3600.0
#: Bytes of the response body kept as the attempt's output tail.
TAIL_BYTES = 4096


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One webhook: method, URL, extra headers and the UTF-8 body sent as is.

    ``retry_on``: 4xx statuses retried like a 5xx (by default a 4xx other than 429 is
    dead at once; 410 always is). ``secret``: the owner's secret that signs it (None: the
    owner's ``default`` secret when there is one, else the request goes unsigned).
    """

    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    body: str = ""
    retry_on: tuple[int, ...] = ()
    secret: str | None = None

    def __post_init__(self) -> None:
        check_request(self)

    @property
    def host(self) -> str:
        return url_parts(self.url).host

    @property
    def scheme(self) -> str:
        return url_parts(self.url).scheme

    @property
    def port(self) -> int:
        return url_parts(self.url).port

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "url": self.url}
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.body:
            out["body"] = self.body
        if self.retry_on:
            out["retry_on"] = list(self.retry_on)
        if self.secret is not None:
            out["secret"] = self.secret
        return out


@dataclass(frozen=True, slots=True)
class UrlParts:
    """What sending needs of a (checked) URL, parsed once per URL (:func:`url_parts`)."""

    scheme: str
    host: str  # lower-case; an IPv6 literal without its brackets
    port: int
    target: str  # path and query: the request line's target
    host_header: str  # the URL's host and port as written (an IDN host in ASCII)
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # an IP literal host


@functools.lru_cache(maxsize=1024)  # a burst sends to a few URLs many times
def url_parts(url: str) -> UrlParts:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netloc = parts.netloc.rpartition("@")[2]
    if not netloc.isascii():
        netloc = host.encode("idna").decode("ascii") + (f":{parts.port}" if parts.port else "")
    try:
        literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return UrlParts(parts.scheme, host, port, target, netloc, literal)


def from_json(data: dict[str, Any] | None) -> HttpRequest | None:
    if not data:
        return None
    return HttpRequest(
        method=data["method"],
        url=data["url"],
        headers=tuple(sorted((data.get("headers") or {}).items())),
        body=data.get("body") or "",
        retry_on=tuple(sorted(set(data.get("retry_on") or ()))),
        secret=data.get("secret"),
    )


def to_text(req: HttpRequest | None) -> str | None:
    """The stored form (a JSON object with sorted keys); None for a command job."""
    return None if req is None else json.dumps(req.to_json(), sort_keys=True)


def from_text(text: str | None) -> HttpRequest | None:
    return from_json(json.loads(text)) if text else None


class _Job(Protocol):
    """What :func:`check_job` reads of a job or template."""

    @property
    def http(self) -> HttpRequest | None: ...
    @property
    def retry_on(self) -> tuple[int, ...] | None: ...
    @property
    def no_retry_on(self) -> tuple[int, ...]: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def resources(self) -> object: ...


def check_job(job: _Job) -> None:
    """An http job has none of a command's settings (exit codes, environment, limits)."""
    if job.http is None:
        return
    if job.retry_on or job.no_retry_on:
        raise InvalidInput("an http job lists retried 4xx codes in http.retry_on, not exit codes")
    if job.env or job.resources:
        raise InvalidInput("an http job takes no environment or resource limits")


def check_request(req: HttpRequest) -> None:
    """Refuse what could not be sent, or would let a job fake the daemon's headers."""
    if req.method not in METHODS:
        raise InvalidInput(f"http method must be one of {', '.join(METHODS)}")
    _check_url(req.url)
    if len(req.headers) > MAX_HEADERS:
        raise InvalidInput(f"at most {MAX_HEADERS} headers")
    for name, value in req.headers:
        check_header(name, value)
    if len(req.body.encode()) > MAX_PAYLOAD_BYTES or not clean_text(req.body):
        raise InvalidInput(f"http body must be UTF-8 text of at most {MAX_PAYLOAD_BYTES} bytes")
    for code in req.retry_on:
        if not (400 <= code <= 499 and code != 410):
            raise InvalidInput(f"--retry-on {code}: an HTTP job retries 4xx codes but 410")
    if req.secret is not None:
        check_secret_name(req.secret)


def _check_url(url: str) -> None:
    if len(url) > MAX_URL or not url.isprintable() or any(c.isspace() for c in url):
        raise InvalidInput(f"url must be 1-{MAX_URL} printable characters without spaces")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise InvalidInput(f"invalid url: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("url must be http:// or https:// with a host")
    if parts.username or parts.password:
        raise InvalidInput("url must not hold credentials (send them in a header)")
    if "[" in parts.netloc:  # an IPv6 literal: an address, without a zone
        try:
            ipaddress.IPv6Address(parts.hostname)
        except ValueError:
            raise InvalidInput(f"invalid IPv6 address in url: [{parts.hostname}]") from None
        if "%" in parts.hostname:
            raise InvalidInput("an IPv6 address in a url may not name a zone (%…)")


def check_header(name: str, value: str) -> None:
    if not HEADER_NAME.match(name):
        raise InvalidInput(f"invalid header name {name!r}")
    if name.lower() in RESERVED_HEADERS:
        raise InvalidInput(f"header {name!r} is set by the daemon")
    if len(value) > MAX_HEADER_VALUE or any(c in value for c in "\r\n\0"):
        raise InvalidInput(f"header {name!r}: the value must be one line of text")


def parse_header(text: str) -> tuple[str, str]:
    """``K:V`` (the CLI's ``--header``) as a checked pair."""
    name, sep, value = text.partition(":")
    if not sep:
        raise InvalidInput(f"--header {text!r}: expected NAME:VALUE")
    pair = (name.strip(), value.strip())
    check_header(*pair)
    return pair


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an answer (or its absence) means for the job: ``ok``, else retried or dead."""

    ok: bool
    retry: bool
    error: str | None
    retry_after: float | None = None


def classify(status: int, retry_on: tuple[int, ...], retry_after: str | None) -> Verdict:
    """Map an HTTP status to the job's fate (Standard Webhooks' guidance): 2xx succeeded;
    429 and 5xx retried, honouring ``Retry-After`` (bounded); 410 dead; 3xx a failure (not
    followed) that is retried; another 4xx dead unless listed in ``retry_on``."""
    if 200 <= status <= 299:
        return Verdict(True, False, None)
    error = f"HTTP {status}"
    if status == 429 or status >= 500:
        return Verdict(False, True, error, retry_after_seconds(retry_after))
    if 300 <= status <= 399:
        return Verdict(False, True, f"{error} (redirects are not followed)")
    if status == 410:
        return Verdict(False, False, f"{error}: the receiver says the target is gone")
    if status in retry_on:
        return Verdict(False, True, error, retry_after_seconds(retry_after))
    return Verdict(False, False, f"{error} (a 4xx is not retried unless listed in --retry-on)")


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as delay-seconds, bounded by :data:`MAX_RETRY_AFTER`; None when
    absent or not a number (an HTTP date is ignored: the daemon's clock is the one used)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER)


__all__ = [
    "DEFAULT_SECRET",
    "DEFAULT_TIMEOUT",
    "HttpRequest",
    "Verdict",
    "WebhookSecret",
    "check_job",
    "check_request",
    "check_secret_name",
    "classify",
    "from_json",
    "from_text",
    "parse_header",
    "to_text",
]


@dataclass(frozen=True, slots=True)
class WebhookSecret:
    """A signing secret of one owner (``jobctl secrets``); times in ms since the epoch.
    After a rotation ``previous`` still signs, as a second signature, until
    ``previous_until``: receivers move to the new secret within that grace period."""

    owner_uid: int
    name: str
    secret: str
    created_at: int
    rotated_at: int | None = None
    previous: str | None = None
    previous_until: int | None = None

    def signing(self, now_ms: int) -> list[str]:
        """The secrets that sign a request sent at ``now_ms``, the newest first."""
        keep = self.previous and self.previous_until is not None and now_ms < self.previous_until
        return [self.secret, self.previous] if keep and self.previous else [self.secret]

    def info(self) -> dict[str, Any]:
        """What a listing shows: never the secret itself."""
        return {
            "owner_uid": self.owner_uid,
            "name": self.name,
            "created_at": self.created_at,
            "rotated_at": self.rotated_at,
            "previous_until": self.previous_until,
        }


def check_secret_name(name: str) -> None:
    if not SECRET_NAME.match(name):
        raise InvalidInput(f"invalid secret name {name!r}: 1-64 of letters, digits, '_', '.', '-'")

"""The runner of webhook jobs (issue 16): sends a job's HTTP request instead of a command.

The executor hands it an http job's claim (engine/executor.py) and gets back an
:class:`AttemptResult`, reported under the claim's generation like any command's: the
lease, its heartbeats, the fence, retries with backoff and the dead-letter queue are
the executor's and the store's, not this module's.

One attempt:

1. the owner's signing secrets are read (``jobctl secrets``; none: sent unsigned);
   concurrent attempts of one owner and secret name share one store read;
2. the URL's host is resolved once (an IP literal is its own address) and every
   address checked (domain/netguard.py);
3. the body's exact bytes are signed (Standard Webhooks v1, :mod:`jobctl.webhooks`) with
   ``webhook-id`` = the job key and ``webhook-timestamp`` = now, and sent to the checked
   address (the name stays in Host and in TLS's SNI and certificate check) on a
   connection of that target's own (engine/httppool.py) that follows no redirect,
   within the per-target limit;
4. the answer is judged by :func:`jobctl.domain.http.classify`; its first 4 KiB are the
   attempt's output tail, with status, latency and the body's SHA-256.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import json
import logging
import socket
from dataclasses import dataclass, field

from jobctl import webhooks
from jobctl.domain import http as web
from jobctl.domain.clock import Clock
from jobctl.domain.models import AttemptResult, Claim
from jobctl.domain.netguard import Address, NetGuard
from jobctl.domain.states import DeadReason, Outcome, StopReason
from jobctl.engine import httpclient
from jobctl.engine.httppool import Target, TargetPools
from jobctl.errors import JobctlError, NotFound
from jobctl.logfmt import logval
from jobctl.store.aio import AsyncStore
from jobctl.store.base import secrets_of

log = logging.getLogger("jobctl.webhook")


@dataclass(frozen=True)
class WebhookConfig:
    guard: NetGuard = field(default_factory=NetGuard)
    #: Requests in flight to one host and port at once (``http_per_target``).
    per_target: int = 8
    #: Connect and per-read timeout when the job sets none (its ``timeout`` caps the call).
    timeout: float = web.DEFAULT_TIMEOUT


class Refused(Exception):
    """The request may not be sent (an address the guard refuses, a missing secret)."""


class Sender:
    """Sends http jobs' requests on pooled connections; one per executor."""

    def __init__(self, store: AsyncStore, clock: Clock, config: WebhookConfig) -> None:
        self._store = store
        self._clock = clock
        self.config = config
        self._pools = TargetPools(config.timeout)
        self._targets: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._reading: dict[tuple[int, str | None], asyncio.Future[list[str]]] = {}

    async def close(self) -> None:
        await self._pools.close()

    def _slot(self, url: web.UrlParts) -> asyncio.Semaphore:
        key = (url.host, url.port)
        found = self._targets.get(key)
        if found is None:
            found = self._targets[key] = asyncio.Semaphore(self.config.per_target)
        return found

    async def send(self, claim: Claim) -> AttemptResult:
        """One attempt of ``claim``'s request; never raises but for cancellation."""
        req = claim.job.spec.http
        assert req is not None
        url = web.url_parts(req.url)
        body = req.body.encode()
        sha = hashlib.sha256(body).hexdigest()
        try:
            secrets = await self._secrets(claim, req)
            ip = url.literal if url.literal is not None else await self._address(url)
        except Refused as exc:
            return _unsendable(f"not sent: {exc}", sha)
        except OSError as exc:  # resolution failed: may mend
            return AttemptResult(Outcome.FAILED, None, f"cannot resolve {url.host}: {exc}",
                                 body_sha256=sha)  # fmt: skip
        except JobctlError as exc:  # the store could not read the secrets: may mend
            return AttemptResult(Outcome.FAILED, None, f"not sent: {exc}", body_sha256=sha)
        why = self.config.guard.refusal(ip, url.port)
        if why is not None:  # an IP literal (a name's addresses were checked in _address)
            return _unsendable(f"not sent: {url.host} resolves to {why}", sha)
        target = (url.scheme, url.host, url.port, ip)
        async with self._slot(url):
            try:  # signed after the wait: a fresh timestamp
                data = self._request(claim, req, url, body, secrets)
            except ValueError as exc:  # e.g. a header value that is not ASCII
                return _unsendable(f"not sent: {exc}", sha)
            return await self._exchange(claim, target, data, sha)

    async def _secrets(self, claim: Claim, req: web.HttpRequest) -> list[str]:
        uid = claim.job.spec.owner_uid
        try:
            return await self._signing(uid, req.secret)
        except NotFound:
            raise Refused(
                f"uid {uid} has no secret {req.secret!r} (jobctl secrets create)"
            ) from None

    async def _signing(self, uid: int, name: str | None) -> list[str]:
        """The store's ``signing_secrets``; a read of the same key in flight is joined (a
        burst of one owner's deliveries reads once, not once each)."""
        key = (uid, name)
        fut = self._reading.get(key)
        if fut is None:
            part = secrets_of(self._store.store)
            fut = asyncio.ensure_future(self._store.run(part.signing_secrets, uid, name))
            self._reading[key] = fut
            fut.add_done_callback(lambda done: self._read_done(key, done))
        return list(await asyncio.shield(fut))

    def _read_done(self, key: tuple[int, str | None], done: asyncio.Future[list[str]]) -> None:
        if self._reading.get(key) is done:
            del self._reading[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have gone

    async def _address(self, url: web.UrlParts) -> Address:
        """Resolve a name once; every address must pass the guard; the first one is used."""
        ips = await self._resolve(url)
        for ip in ips:
            why = self.config.guard.refusal(ip, url.port)
            if why is not None:
                raise Refused(f"{url.host} resolves to {why}")
        if not ips:
            raise OSError(f"{url.host}: no address")
        return ips[0]

    async def _resolve(self, url: web.UrlParts) -> list[Address]:
        loop = asyncio.get_running_loop()
        infos = await asyncio.wait_for(
            loop.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM), self.config.timeout
        )
        return list(dict.fromkeys(ipaddress.ip_address(i[4][0]) for i in infos))

    def _request(
        self,
        claim: Claim,
        req: web.HttpRequest,
        url: web.UrlParts,
        body: bytes,
        secrets: list[str],
    ) -> bytes:
        """The request's bytes: the job's headers, then the daemon's (Host: the name as
        the URL spells it, the signature over the exact body bytes, the job's ids)."""
        headers = dict(req.headers)
        if body and not any(k.lower() == "content-type" for k in headers):
            headers["content-type"] = _content_type(req.body)
        ts = int(self._clock.now().timestamp())
        headers |= webhooks.sign(secrets, claim.job.key, ts, body)
        headers["x-jobctl-job-id"] = str(claim.job.id)
        headers["x-jobctl-attempt"] = str(claim.attempt)
        headers["x-jobctl-generation"] = str(claim.generation)
        return httpclient.request_bytes(req.method, url.target, url.host_header, headers, body)

    async def _exchange(self, claim: Claim, target: Target, data: bytes, sha: str) -> AttemptResult:
        spec = claim.job.spec
        assert spec.http is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        timeout = spec.timeout
        try:
            if timeout is None:
                answer = await self._pools.exchange(target, data)
            else:
                async with asyncio.timeout(timeout):
                    answer = await self._pools.exchange(target, data)
        except TimeoutError as exc:  # connect, a read, or the job's whole-call cap
            waited = timeout if timeout is not None else self.config.timeout
            error = f"timed out after {waited:g}s ({_reason(exc)})"
            return AttemptResult(Outcome.TIMEOUT, None, error, body_sha256=sha,
                                 latency_ms=_ms(loop.time() - started))  # fmt: skip
        except OSError as exc:  # refused, reset, TLS, an answer that is not HTTP/1.1
            return AttemptResult(Outcome.FAILED, None, _reason(exc), body_sha256=sha,
                                 latency_ms=_ms(loop.time() - started))  # fmt: skip
        latency = _ms(loop.time() - started)
        verdict = web.classify(answer.status, spec.http.retry_on, answer.retry_after)
        _log_call(claim, answer.status, latency)
        outcome = Outcome.SUCCEEDED if verdict.ok else Outcome.FAILED
        dead = None if verdict.ok or verdict.retry else DeadReason.NON_RETRYABLE
        return AttemptResult(
            outcome, None, verdict.error, answer.tail, dead, retry_after=verdict.retry_after,
            http_status=answer.status, latency_ms=latency, body_sha256=sha,
        )  # fmt: skip


class Call:
    """A live http attempt, sent by the task awaiting :meth:`result` (no task of its own:
    one task per delivery, not two), and why it was stopped (cancel, lease, shutdown)."""

    def __init__(self, claim: Claim, sender: Sender) -> None:
        self.claim = claim
        self._sender = sender
        self._sending: asyncio.Task[object] | None = None  # cancelled by stop, once
        self.stop_reason: StopReason | None = None
        self.stop_detail: str | None = None

    def stop(self, reason: StopReason, detail: str | None = None) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stop_detail = detail or reason.text
        if self._sending is not None:
            self._sending.cancel()
            self._sending = None

    async def result(self) -> AttemptResult:
        """Send, in the calling task; a stop ends the send with the stopped result. A
        cancellation of the caller itself (not by :meth:`stop`) is raised."""
        task = asyncio.current_task()
        assert task is not None
        if self.stop_reason is None:
            self._sending = task
            try:
                return await self._sender.send(self.claim)
            except asyncio.CancelledError:
                if self.stop_reason is None or self._sending is not None or task.uncancel():
                    raise  # the caller itself is being cancelled
            except Exception as exc:  # a bug: the attempt still ends (and is retried)
                log.error("event=http_send_failed job=%s error=%s", self.claim.job.id,
                          logval(exc))  # fmt: skip
                return AttemptResult(
                    Outcome.FAILED, None, f"cannot send: {type(exc).__name__}: {exc}"
                )
            finally:
                self._sending = None
        reason = self.stop_reason
        assert reason is not None
        error = reason.text if reason is StopReason.SHUTDOWN else self.stop_detail
        return AttemptResult(reason.outcome, None, error)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _unsendable(error: str, sha: str) -> AttemptResult:
    """A request that cannot be sent as it is: no retry can mend it."""
    return AttemptResult(Outcome.FAILED, None, error, dead_reason=DeadReason.NON_RETRYABLE,
                         body_sha256=sha)  # fmt: skip


def _content_type(body: str) -> str:
    """A burst sends one body many times: a small one is parsed once (a large one is not
    kept: the cache must not hold megabytes)."""
    return _sniffed(body) if len(body) <= 4096 else _sniff(body)


@functools.lru_cache(maxsize=256)
def _sniffed(body: str) -> str:
    return _sniff(body)


def _sniff(body: str) -> str:
    try:
        json.loads(body)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _log_call(claim: Claim, status: int, latency: int) -> None:
    if log.isEnabledFor(logging.INFO):  # the URL only: headers and body may hold secrets
        req = claim.job.spec.http
        log.info("event=http_answer job=%s attempt=%s status=%s latency_ms=%s host=%s",
                 claim.job.id, claim.attempt, status, latency,
                 logval(req.host if req else ""))  # fmt: skip


__all__ = ["Call", "Refused", "Sender", "WebhookConfig"]

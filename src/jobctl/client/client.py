"""A small typed client over the daemon's Unix socket.

Policy (paths, error mapping, JSON) lives in :class:`Client`; I/O lives in a
:class:`Transport`: :class:`~jobctl.client.transport.UnixTransport` speaks HTTP/1.1 over
the socket with the socket module alone (no HTTP library: the CLI starts fast and a
request costs little CPU), and tests may pass any other transport. Error bodies become
the same :mod:`jobctl.errors` classes the daemon raised (client/wire.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from jobctl import errors
from jobctl.client.transport import IDLE_RECONNECT, UnixTransport
from jobctl.client.wire import dumps, error_from, loads, not_utf8
from jobctl.paths import socket_path_problem

__all__ = ["IDLE_RECONNECT", "Client", "Transport", "UnixTransport", "loads"]


class Transport(Protocol):
    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """Send one request; return (status, content type, body). OSError if unreachable."""
        ...

    def close(self) -> None: ...


class Client:
    def __init__(
        self, socket: Path, transport: Transport | None = None, timeout: float = 30.0
    ) -> None:
        self.socket = socket
        self._transport = transport or UnixTransport(socket, timeout)

    def close(self) -> None:
        self._transport.close()

    def hang_up(self) -> None:
        """Half-close the connection (a transport that can): a long-poll in flight
        answers at once and grants nothing more; its answer is still read. For a worker
        stopping mid-poll (safe in a signal handler on the thread making the request)."""
        hang_up = getattr(self._transport, "hang_up", None)
        if hang_up is not None:
            hang_up()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """Socket errors of one exchange with the daemon, as the errors a user reads."""
        try:
            yield
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise errors.DaemonUnavailable(
                f"the daemon is not running (no answer on {self.socket}); "
                f"{start_hint(self.socket)}",
                socket=str(self.socket),
            ) from exc
        except OSError as exc:
            problem = socket_path_problem(self.socket)
            if problem:  # no daemon can listen there: a usage error, not a lost connection
                raise errors.InvalidInput(problem) from None
            raise errors.DaemonUnavailable(
                f"lost the connection to the daemon on {self.socket}: {exc}"
            ) from exc

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        try:
            if params:
                path += "?" + urlencode(
                    [(k, v) for k, v in params.items() if v is not None], doseq=True
                )
            body = None if json_body is None else dumps(json_body)
            if body is not None and b"\\ud" in body:  # an escaped surrogate: test it
                json.dumps(json_body, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            raise not_utf8(exc) from None
        headers = {"content-type": "application/json"} if body is not None else {}
        try:  # the context manager only on a failure: entering one cost every call
            status, ctype, data = self._transport.request(method, path, body, headers)
        except OSError:
            with self._reaching():
                raise
        if status >= 400:
            raise error_from(status, data)
        if ctype.startswith("application/json"):
            return loads(data)
        return data.decode("utf-8", errors="replace")

    # -- typed calls ------------------------------------------------------------------

    def enqueue(self, job: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/v1/jobs", json_body=job)
        return result

    def enqueue_many(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("POST", "/v1/jobs", json_body=jobs)
        return result

    def get(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/jobs/{job_id}")
        return result

    def page(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One page of a list route: ``{"items": [...], "next_cursor": ...}``; pass
        ``cursor`` (the previous page's ``next_cursor``) in ``params`` for the next."""
        result: dict[str, Any] = self.request("GET", path, params=params)
        return result

    def pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every page of a list route from ``params["cursor"]`` (or the first) on, one
        request each as the caller asks for it: a walk of any length in bounded memory."""
        params = dict(params or {})
        while True:
            got = self.page(path, params)
            yield got
            if got["next_cursor"] is None:
                return
            params["cursor"] = got["next_cursor"]

    def list_jobs(
        self,
        status: str | None = None,
        queue: str | None = None,
        limit: int = 100,
        before: int | None = None,
        *,
        all_users: bool = False,
    ) -> list[dict[str, Any]]:
        """One page of jobs, newest first (its items; :meth:`page` gives the cursor)."""
        params = {"status": status, "queue": queue, "limit": limit, "before": before}
        items: list[dict[str, Any]] = self.page("/v1/jobs", params | _all_users(all_users))["items"]
        return items

    def attempts(self, job_id: int, limit: int = 100) -> list[dict[str, Any]]:
        """Every attempt of a job, in order, fetched a page of ``limit`` at a time."""
        params = {"limit": limit}
        return [
            a for got in self.pages(f"/v1/jobs/{job_id}/attempts", params) for a in got["items"]
        ]

    def log(self, job_id: int, attempt: int) -> str:
        return str(self.request("GET", f"/v1/jobs/{job_id}/attempts/{attempt}/log"))

    def stream_log(
        self,
        job_id: int,
        attempt: int,
        sink: Callable[[bytes], None],
        *,
        tail: int | None = None,
        offset: int = 0,
    ) -> dict[str, str]:
        """Hand the attempt's log (from ``offset``, or its last ``tail`` lines) to ``sink``
        as it arrives, never holding it whole. Returns the answer's header fields
        (lower-case): ``x-log-start``, ``x-log-size``, ``x-attempt-running``, ..."""
        path = f"/v1/jobs/{job_id}/attempts/{attempt}/log"
        query = {"tail": tail, "offset": offset or None}
        if any(v is not None for v in query.values()):
            path += "?" + urlencode([(k, v) for k, v in query.items() if v is not None])
        stream = getattr(self._transport, "stream", None)
        if stream is None:  # a test transport: one request, the body whole
            status, _ctype, data = self._transport.request("GET", path, None, {})
            fields: dict[str, str] = {}
        else:
            with self._reaching():
                status, fields, data = stream(path, sink)
        if status >= 400:
            raise error_from(status, data)
        if stream is None:
            sink(data)
        return fields

    def cancel(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/v1/jobs/{job_id}/cancel")
        return result

    def rerun(self, job_id: int, run_at: str | None = None) -> dict[str, Any]:
        """A new job (the old one's owner's) from a finished job's definition."""
        body = {} if run_at is None else {"run_at": run_at}
        result: dict[str, Any] = self.request("POST", f"/v1/jobs/{job_id}/rerun", json_body=body)
        return result

    def dead(
        self,
        limit: int = 100,
        queue: str | None = None,
        reason: str | None = None,
        since: str | None = None,
        *,
        all_users: bool = False,
    ) -> list[dict[str, Any]]:
        """One page of dead jobs, most recent deaths first (:meth:`page` gives the cursor)."""
        params = {"limit": limit, "queue": queue, "reason": reason, "since": since}
        params |= _all_users(all_users)
        items: list[dict[str, Any]] = self.page("/v1/dlq", params)["items"]
        return items

    def replay(
        self,
        limit: int = 10,
        ids: list[int] | None = None,
        queue: str | None = None,
        reason: str | None = None,
        rate: float | None = 1.0,
        *,
        all_users: bool = False,
    ) -> list[dict[str, Any]]:
        body = {"limit": limit, "ids": ids or None, "queue": queue, "reason": reason, "rate": rate}
        if all_users:
            body["all_users"] = True
        result: dict[str, Any] = self.request("POST", "/v1/dlq/replay", json_body=body)
        replayed: list[dict[str, Any]] = result["replayed"]
        return replayed

    def purge_dead(self, older_than: float, *, all_users: bool = False) -> int:
        params = {"older_than": older_than} | _all_users(all_users)
        result = self.request("DELETE", "/v1/dlq", params=params)
        return int(result["purged"])

    def queues(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/v1/queues")
        return result

    def set_queue(self, name: str, limits: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PATCH", f"/v1/queues/{_quote(name, 'queue name')}", json_body=limits
        )
        return result

    def queue_action(self, name: str, action: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", f"/v1/queues/{_quote(name, 'queue name')}/{action}"
        )
        return result

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/v1/status")
        return result

    def config(self) -> dict[str, Any]:
        """The daemon's effective settings and their sources (admins only: Forbidden)."""
        result: dict[str, Any] = self.request("GET", "/v1/config")
        return result

    def audit(
        self,
        uid: int | None = None,
        action: str | None = None,
        since: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Audit records, newest first (admins only: others get Forbidden)."""
        params = {"uid": uid, "action": action, "since": since, "before": before, "limit": limit}
        items: list[dict[str, Any]] = self.page("/v1/audit", params)["items"]
        return items

    # -- schedules -----------------------------------------------------------------------

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/v1/schedules", json_body=body)
        return result

    def create_schedules(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create up to 1,000 schedules in one request; one answer per body, in order: the
        schedule with ``created: True``, or ``created: False`` and its ``error``."""
        result: list[dict[str, Any]] = self.request("POST", "/v1/schedules", json_body=bodies)
        return result

    def schedules(
        self,
        deleted: bool = False,
        limit: int | None = None,
        page: int = 1000,
        *,
        all_users: bool = False,
    ) -> list[dict[str, Any]]:
        """Schedules oldest first: all of them, or the first ``limit``, fetched by pages
        of ``page`` (for a walk in bounded memory, iterate :meth:`pages` instead)."""
        size = page if limit is None else min(page, limit)
        params = {"deleted": "true" if deleted else None, "limit": size} | _all_users(all_users)
        found: list[dict[str, Any]] = []
        for got in self.pages("/v1/schedules", params):
            found += got["items"]
            if limit is not None and len(found) >= limit:
                return found[:limit]
        return found

    def schedule(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/schedules/{_quote(ref)}")
        return result

    def schedule_action(self, ref: str, action: str) -> dict[str, Any]:
        """``pause``, ``resume`` or ``trigger`` (the latter answers with the new job)."""
        result: dict[str, Any] = self.request("POST", f"/v1/schedules/{_quote(ref)}/{action}")
        return result

    def edit_schedule(self, ref: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Change the fields in ``patch`` (a JSON merge); the answer has the edit under
        ``edit``."""
        result: dict[str, Any] = self.request(
            "PATCH", f"/v1/schedules/{_quote(ref)}", json_body=patch
        )
        return result

    def delete_schedule(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", f"/v1/schedules/{_quote(ref)}")
        return result

    # -- pull workers (docs/workers.md) -------------------------------------------------

    def lease(
        self, queues: list[str], max_jobs: int = 1, wait: float = 0, lease_ttl: float = 30.0
    ) -> list[dict[str, Any]]:
        """Up to ``max_jobs`` due jobs of these worker queues, waiting up to ``wait`` s
        (the client's timeout must be longer than ``wait``)."""
        body = {"queues": queues, "max": max_jobs, "wait": wait, "lease_ttl": lease_ttl}
        result: dict[str, Any] = self.request("POST", "/v1/leases", json_body=body)
        leases: list[dict[str, Any]] = result["leases"]
        return leases

    def finish_and_lease(
        self,
        queues: list[str],
        finish: list[dict[str, Any]],
        max_jobs: int = 0,
        wait: float = 0,
        lease_ttl: float = 30.0,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Record these outcomes (``{"id", "generation", "outcome": "complete"|"fail",
        "result"|"error", "retryable"}``), then lease up to ``max_jobs`` more, in one
        request: (leases, one answer per outcome, in order: ``status`` and ``repeated``,
        or ``error`` with code ``lease_lost`` or ``not_found``)."""
        body = {
            "queues": queues,
            "max": max_jobs,
            "wait": wait,
            "lease_ttl": lease_ttl,
            "finish": finish,
        }
        result: dict[str, Any] = self.request("POST", "/v1/leases", json_body=body)
        return result["leases"], result.get("finished", [])

    def heartbeat(self, job_id: int, generation: int, lease_ttl: float = 30.0) -> None:
        """Extend a lease; :class:`~jobctl.errors.LeaseLost` if it was lost."""
        body = {"generation": generation, "lease_ttl": lease_ttl}
        self.request("POST", f"/v1/leases/{job_id}/heartbeat", json_body=body)

    def complete(self, job_id: int, generation: int, result: Any = None) -> dict[str, Any]:
        body = {"generation": generation, "result": result}
        out: dict[str, Any] = self.request("POST", f"/v1/leases/{job_id}/complete", json_body=body)
        return out

    def fail(
        self, job_id: int, generation: int, error: str, retryable: bool = True
    ) -> dict[str, Any]:
        body = {"generation": generation, "error": error, "retryable": retryable}
        out: dict[str, Any] = self.request("POST", f"/v1/leases/{job_id}/fail", json_body=body)
        return out

    def release(self, job_id: int, generation: int, delay: float = 0) -> dict[str, Any]:
        """Give a leased job back unrun (no attempt used): due again after ``delay`` s."""
        body = {"generation": generation, "delay": float(delay)}
        out: dict[str, Any] = self.request("POST", f"/v1/leases/{job_id}/release", json_body=body)
        return out

    def queue_workers(self, name: str) -> dict[str, Any]:
        """A queue's workers list (null: the executor's queue) and the live workers."""
        path = f"/v1/queues/{_quote(name, 'queue name')}/workers"
        out: dict[str, Any] = self.request("GET", path)
        return out

    def set_worker_queue(self, name: str, allow: list[str]) -> dict[str, Any]:
        """Make ``name`` a worker queue and say who else may lease it (admins)."""
        path = f"/v1/queues/{_quote(name, 'queue name')}/workers"
        out: dict[str, Any] = self.request("PUT", path, json_body={"allow": allow})
        return out


def _all_users(all_users: bool) -> dict[str, Any]:
    """The query parameter of an admin's request for every user's items (else nothing)."""
    return {"all_users": "true"} if all_users else {}


def _quote(ref: str, what: str = "schedule id or name") -> str:
    """``ref`` as one path segment. An empty one would name the collection instead (a
    list where one object was expected), so it is refused here."""
    if not ref:
        raise errors.InvalidInput(f"the {what} is empty")
    try:
        return quote(ref, safe="")
    except UnicodeEncodeError as exc:
        raise not_utf8(exc) from None


def start_hint(socket: Path) -> str:
    """How to start the daemon this client looks for: root's system service, a user's
    own (only where the user has a runtime directory, so a systemd user instance), or by
    hand on the socket asked for."""
    from jobctl.paths import standard_socket

    if socket != standard_socket():
        return f"start one there with 'jobctl daemon --socket {socket}'"
    if os.geteuid() == 0:
        return "start it with 'systemctl start jobctl.socket' or 'jobctl daemon'"
    if os.environ.get("XDG_RUNTIME_DIR") or os.path.isdir(f"/run/user/{os.geteuid()}"):
        return "start it with 'systemctl --user start jobctl.socket' or 'jobctl daemon'"
    return "start it with 'jobctl daemon' (no runtime directory here for a systemd user service)"

"""A small typed client over the daemon's Unix socket.

Policy (paths, error mapping) lives here; I/O is httpx's: the ``uds`` transport in
production, or any httpx transport (e.g. ``httpx.ASGITransport`` around the app) in
tests. Error bodies become the same :mod:`jobctl.errors` classes the daemon raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from jobctl import errors

_BY_CODE: dict[str, type[errors.JobctlError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidInput, errors.InvalidSchedule, errors.NotFound, errors.Conflict,
        errors.KeyConflict, errors.IllegalTransition, errors.LeaseLost, errors.DaemonLocked,
        errors.StoreError,
    )
}


class Client:
    def __init__(
        self, socket: Path, transport: httpx.BaseTransport | None = None, timeout: float = 30.0
    ) -> None:
        self.socket = socket
        self._http = httpx.Client(
            transport=transport or httpx.HTTPTransport(uds=str(socket)),
            base_url="http://localhost", timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            response = self._http.request(method, path, **kw)
        except (httpx.ConnectError, FileNotFoundError, ConnectionRefusedError) as exc:
            raise errors.DaemonUnavailable(
                f"the daemon is not running (no answer on {self.socket}); start it with "
                f"'jobctl daemon' or 'systemctl --user start jobctl'",
                socket=str(self.socket),
            ) from exc
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(
                f"lost the connection to the daemon on {self.socket}: {exc}") from exc
        if response.status_code >= 400:
            raise _error_from(response)
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    # -- typed calls ------------------------------------------------------------------

    def enqueue(self, job: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/v1/jobs", json=job)
        return result

    def enqueue_many(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("POST", "/v1/jobs", json=jobs)
        return result

    def get(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/jobs/{job_id}")
        return result

    def list(self, status: str | None = None, queue: str | None = None,
             limit: int = 100, before: int | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in
                  {"status": status, "queue": queue, "limit": limit, "before": before}.items()
                  if v is not None}
        result: list[dict[str, Any]] = self.request("GET", "/v1/jobs", params=params)
        return result

    def log(self, job_id: int, attempt: int) -> str:
        return str(self.request("GET", f"/v1/jobs/{job_id}/attempts/{attempt}/log"))

    def cancel(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/v1/jobs/{job_id}/cancel")
        return result

    def dead(self, limit: int = 100, queue: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if queue:
            params["queue"] = queue
        result: list[dict[str, Any]] = self.request("GET", "/v1/dlq", params=params)
        return result

    def replay(self, limit: int = 10, ids: list[int] | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"limit": limit, "ids": ids or None}
        result: dict[str, Any] = self.request("POST", "/v1/dlq/replay", json=body)
        replayed: list[dict[str, Any]] = result["replayed"]
        return replayed

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/v1/status")
        return result


def _error_from(response: httpx.Response) -> errors.JobctlError:
    try:
        err = response.json()["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        return errors.JobctlError(f"daemon answered HTTP {response.status_code}: "
                                  f"{response.text[:200]}")
    cls = _BY_CODE.get(code, errors.JobctlError)
    exc = cls(message, **{k: v for k, v in err.items() if k not in ("code", "message")})
    return exc

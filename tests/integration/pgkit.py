"""Real daemons on one PostgreSQL database of their own, for the fault and limit tests:
start them (directly or through a :class:`~tests.integration.tcpcut.TcpCut` proxy, with
a skewed clock), speak raw HTTP to their sockets, and act on the database from outside
(``pg_terminate_backend`` of its connections only, never the server)."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.contract.conftest import PG_DSN
from tests.integration.conftest import DaemonProc


def url(dbname: str, port: int | None = None) -> str:
    """The database's URL, directly or through the proxy listening on ``port``."""
    server = urlsplit(PG_DSN)
    where = f"{server.hostname}:{port or server.port or 5432}"
    return urlunsplit(server._replace(netloc=f"postgres@{where}", path="/" + dbname))


def upstream() -> tuple[str, int]:
    server = urlsplit(PG_DSN)
    return server.hostname or "127.0.0.1", server.port or 5432


class Cluster:
    """Daemons on one database; all stopped by :meth:`stop_all`."""

    def __init__(self, tmp: Path, dbname: str) -> None:
        self.tmp = tmp
        self.dbname = dbname
        self.made: list[DaemonProc] = []

    def start(
        self,
        name: str,
        *extra: str,
        ttl: float = 3,
        port: int | None = None,
        env: dict[str, str] | None = None,
        concurrency: int = 4,
    ) -> DaemonProc:
        home = self.tmp / name
        d = DaemonProc(
            home,
            "--state-dir", str(home / "state"),
            "--lease-ttl", str(ttl),
            "--kill-grace", "1",
            "--shutdown-grace", "1",
            "--concurrency", str(concurrency),
            *extra,
            env=env,
        )  # fmt: skip
        d.db_arg = url(self.dbname, port)
        self.made.append(d)
        return d.start()

    def stop_all(self) -> None:
        for d in self.made:
            d.stop()


def cluster_of(tmp: Path, dbname: str) -> Iterator[Cluster]:
    c = Cluster(tmp, dbname)
    try:
        yield c
    finally:
        c.stop_all()


def sql(dbname: str, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement on ``dbname``, past any proxy (autocommit); its rows."""
    import psycopg

    with psycopg.connect(url(dbname), autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(text.encode(), params)
        return cur.fetchall() if cur.description else []


def terminate_all(dbname: str) -> int:
    """``pg_terminate_backend`` of every connection to ``dbname`` (only this test's
    database: other tests' connections and the server are left alone); how many."""
    rows = sql(
        dbname,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = %s AND pid <> pg_backend_pid()",
        (dbname,),
    )
    return int(rows[0][0])


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=30)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def raw(
    d: DaemonProc, method: str, path: str, body: object = None
) -> tuple[int, dict[str, str], Any]:
    """One request to ``d``'s socket: status, headers (lower-case names) and JSON body."""
    conn = _UnixHTTP(d.socket)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read().decode()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, json.loads(payload) if payload else None
    finally:
        conn.close()

"""Signing secrets of webhook jobs, a part of both stores (SQLite and PostgreSQL).

A secret is made by the caller (:func:`jobctl.webhooks.new_secret`) and only kept here:
the store never logs one, and the API answers its value only to its owner and admins
(api/secrets.py). Each write is a compare-and-set on the ``(owner_uid, name)`` row that
checks it hit it: a miss is :class:`~jobctl.errors.NotFound` (or ``Conflict`` for a
create of a name already taken).

The logic is written once, against :class:`~jobctl.store.schedconn.SchedConn` (named
statements run by name, each backend's query file holding the same ``secret_*`` names),
as the schedule part is: SQLite wraps its connection in ``SqliteSchedConn``, PostgreSQL
in ``PgSchedConn``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from jobctl.domain.http import WebhookSecret
from jobctl.errors import Conflict, NotFound
from jobctl.store.rows import RowLike
from jobctl.store.schedconn import SchedConn, ScheduleDb

T = TypeVar("T")


def secret_from_row(row: RowLike) -> WebhookSecret:
    return WebhookSecret(
        owner_uid=row["owner_uid"],
        name=row["name"],
        secret=row["secret"],
        created_at=row["created_at"],
        rotated_at=row["rotated_at"],
        previous=row["previous"],
        previous_until=row["previous_until"],
    )


def _missing(owner_uid: int, name: str) -> NotFound:
    return NotFound(f"no secret {name!r} of uid {owner_uid}", owner_uid=owner_uid, name=name)


class SecretOps:
    """``create_secret``, ``get_secret``, ``list_secrets``, ``rotate_secret``,
    ``delete_secret`` and ``signing_secrets`` of the store."""

    def __init__(
        self, db: ScheduleDb, now_ms: Callable[[], int], wrap: Callable[[Any], SchedConn]
    ) -> None:
        self._db = db
        self._now_ms = now_ms
        self._wrap = wrap

    def _write(self, fn: Callable[[SchedConn], T]) -> T:
        return self._db.write(lambda conn: fn(self._wrap(conn)))

    def _read(self, fn: Callable[[SchedConn], T]) -> T:
        return self._db.read(lambda conn: fn(self._wrap(conn)))

    def create_secret(self, owner_uid: int, name: str, secret: str) -> WebhookSecret:
        def tx(conn: SchedConn) -> WebhookSecret:
            params = {"owner_uid": owner_uid, "name": name, "secret": secret}
            if not conn.run("secret_insert", params | {"now": self._now_ms()}):
                raise Conflict(f"secret {name!r} exists already (rotate or delete it)", name=name)
            return _get(conn, owner_uid, name)

        return self._write(tx)

    def get_secret(self, owner_uid: int, name: str) -> WebhookSecret:
        return self._read(lambda conn: _get(conn, owner_uid, name))

    def list_secrets(self, owner_uid: int | None) -> list[WebhookSecret]:
        def read(conn: SchedConn) -> list[WebhookSecret]:
            rows = conn.rows("secret_list", {"owner_uid": owner_uid})
            return [secret_from_row(r) for r in rows]

        return self._read(read)

    def rotate_secret(self, owner_uid: int, name: str, secret: str, grace_ms: int) -> WebhookSecret:
        def tx(conn: SchedConn) -> WebhookSecret:
            now = self._now_ms()
            params = {"owner_uid": owner_uid, "name": name, "secret": secret}
            params |= {"now": now, "until": now + grace_ms}
            if conn.run("secret_rotate", params) != 1:
                raise _missing(owner_uid, name)
            return _get(conn, owner_uid, name)

        return self._write(tx)

    def delete_secret(self, owner_uid: int, name: str) -> None:
        def tx(conn: SchedConn) -> None:
            params = {"owner_uid": owner_uid, "name": name}
            if conn.run("secret_delete", params) != 1:
                raise _missing(owner_uid, name)

        self._write(tx)

    def signing_secrets(self, owner_uid: int, name: str | None) -> list[str]:
        """The secrets that sign an http job of ``owner_uid`` now: ``name``'s (NotFound
        if it has none), or with no name the ``default`` one's, or none (unsigned)."""
        try:
            found = self.get_secret(owner_uid, name or "default")
        except NotFound:
            if name is None:
                return []
            raise
        return found.signing(self._now_ms())


def _get(conn: SchedConn, owner_uid: int, name: str) -> WebhookSecret:
    row = conn.one("secret_get", {"owner_uid": owner_uid, "name": name})
    if row is None:
        raise _missing(owner_uid, name)
    return secret_from_row(row)


__all__ = ["SecretOps", "secret_from_row"]

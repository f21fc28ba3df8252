"""Signing secrets of webhook jobs in the SQLite store (a part of SqliteStore).

A secret is made by the caller (:func:`jobctl.webhooks.new_secret`) and only kept here:
the store never logs one, and the API answers its value only to its owner and admins
(api/secrets.py). Each write is a compare-and-set on the ``(owner_uid, name)`` row that
checks it hit it: a miss is :class:`~jobctl.errors.NotFound` (or ``Conflict`` for a
create of a name already taken).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from jobctl.domain.http import WebhookSecret
from jobctl.errors import Conflict, NotFound
from jobctl.store.queries import q
from jobctl.store.rows import RowLike

if TYPE_CHECKING:
    from jobctl.store.sqlitedb import SqliteDb


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

    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def create_secret(self, owner_uid: int, name: str, secret: str) -> WebhookSecret:
        def tx(conn: sqlite3.Connection) -> WebhookSecret:
            params = {"owner_uid": owner_uid, "name": name, "secret": secret}
            if not conn.execute(q("secret_insert"), params | {"now": self.db.now_ms()}).rowcount:
                raise Conflict(f"secret {name!r} exists already (rotate or delete it)", name=name)
            return _get(conn, owner_uid, name)

        return self.db.write(tx)

    def get_secret(self, owner_uid: int, name: str) -> WebhookSecret:
        return self.db.read(lambda conn: _get(conn, owner_uid, name))

    def list_secrets(self, owner_uid: int | None) -> list[WebhookSecret]:
        def read(conn: sqlite3.Connection) -> list[WebhookSecret]:
            rows = conn.execute(q("secret_list"), {"owner_uid": owner_uid})
            return [secret_from_row(r) for r in rows]

        return self.db.read(read)

    def rotate_secret(self, owner_uid: int, name: str, secret: str, grace_ms: int) -> WebhookSecret:
        def tx(conn: sqlite3.Connection) -> WebhookSecret:
            now = self.db.now_ms()
            params = {"owner_uid": owner_uid, "name": name, "secret": secret}
            params |= {"now": now, "until": now + grace_ms}
            if conn.execute(q("secret_rotate"), params).rowcount != 1:
                raise _missing(owner_uid, name)
            return _get(conn, owner_uid, name)

        return self.db.write(tx)

    def delete_secret(self, owner_uid: int, name: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            params = {"owner_uid": owner_uid, "name": name}
            if conn.execute(q("secret_delete"), params).rowcount != 1:
                raise _missing(owner_uid, name)

        self.db.write(tx)

    def signing_secrets(self, owner_uid: int, name: str | None) -> list[str]:
        """The secrets that sign an http job of ``owner_uid`` now: ``name``'s (NotFound
        if it has none), or with no name the ``default`` one's, or none (unsigned)."""
        try:
            found = self.get_secret(owner_uid, name or "default")
        except NotFound:
            if name is None:
                return []
            raise
        return found.signing(self.db.now_ms())


def _get(conn: sqlite3.Connection, owner_uid: int, name: str) -> WebhookSecret:
    row = conn.execute(q("secret_get"), {"owner_uid": owner_uid, "name": name}).fetchone()
    if row is None:
        raise _missing(owner_uid, name)
    return secret_from_row(row)


__all__ = ["SecretOps", "secret_from_row"]

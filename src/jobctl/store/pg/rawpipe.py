"""The pipelined commit's statements sent through libpq itself (psycopg's ``pq`` layer),
not through psycopg's cursors: the hot path of single-job enqueues on PostgreSQL.

Why: a pipelined group commit sends five statements (``BEGIN``, the queues' locks, the
``INSERT``, the audit rows, ``COMMIT``). Through psycopg's cursors, each one built a cursor,
its adapters map and a chain of generators, and the committer thread spent ~490 µs of CPU
per commit in them (ten times the server's fsync here), all of it holding the GIL the
event loop needs and all of it on every request's path (issue 15's benchmark,
docs/benchmarks.md "PostgreSQL commit through libpq"). Here a statement is one libpq call
with its parameters as text, and the answers are read with a handful more.

What stays the same: the statements, their parameters' text (what psycopg's text dumpers
send for ``str`` and ``int``; anything else is refused before a byte goes out, and the
group commit then goes the checked way, through psycopg), one round trip (the pipeline's
sync), and psycopg's own view of the connection: it is idle before and after, and nothing
of it is left in pipeline mode. Each statement is prepared once per server session (a
name of this module's, never psycopg's ``_pg3_`` ones), as psycopg would after a few
runs: the server plans the ``INSERT`` once, not per commit.
"""

from __future__ import annotations

import itertools
import select
import weakref
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import pq

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_SYNC = pq.ExecStatus.PIPELINE_SYNC
#: Statement names prepared on each connection's session, by statement text.
_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection[Any], dict[str, bytes]] = (
    weakref.WeakKeyDictionary()
)
#: SQLSTATE of "prepared statement does not exist" (invalid_sql_statement_name).
GONE = b"26000"
#: Statement names: unique in this process, so in every session it opens.
_NAMES = itertools.count()


class Failed(Exception):
    """A statement of the pipeline failed: the server skipped the rest, ``COMMIT``
    included, so nothing of the transaction is stored."""


class Broken(Exception):
    """The connection failed or did not answer within the wait: whatever was sent may or
    may not have run."""


class Pipe:
    """The statements of one pipelined transaction (see the module docstring): queue them
    with :meth:`execute`, send them and read every answer with :meth:`run`, then read a
    statement's rows with :meth:`rows`."""

    def __init__(self, conn: psycopg.Connection[Any], wait: float) -> None:
        """``wait``: seconds :meth:`run` waits for the server at most (a bound above the
        sessions' ``statement_timeout``: past it the connection is taken as broken)."""
        self._conn = conn
        self._pg = conn.pgconn
        self._wait_ms = int(wait * 1000)
        self._names = _PREPARED.setdefault(conn, {})
        self._preparing: dict[str, bytes] = {}  # prepared by this pipe, not yet answered
        #: Per command sent, in order: (text, name) for a prepare, else the statement's
        #: slot in the answers.
        self._commands: list[tuple[str, bytes] | int] = []
        self._results: list[pq.abc.PGresult | None] = []
        #: What :meth:`take` reads: the commands still to answer, the current one's
        #: results so far, the first failure's text.
        self._pending = iter(self._commands)
        self._current: list[pq.abc.PGresult] = []
        self._failed: str | None = None

    def execute(self, text: str, params: Sequence[object] = ()) -> int:
        """Queue ``text`` (``$1``-style placeholders) with ``params``; the index of its
        answer for :meth:`rows`. Raises :class:`TypeError` or :class:`ValueError` for a
        parameter it will not send (before anything is sent for it)."""
        values = _texts(params)
        name = self._names.get(text) or self._preparing.get(text)
        if name is None:
            name = self._preparing[text] = f"jobctl_{next(_NAMES)}".encode()
            self._pg.send_prepare(name, text.encode())
            self._commands.append((text, name))
        self._pg.send_query_prepared(name, values)
        self._commands.append(len(self._results))
        self._results.append(None)
        return len(self._results) - 1

    def run(self) -> None:
        """Send everything queued with a sync and read every answer (one round trip).
        :class:`Failed` if a statement failed, :class:`Broken` if the connection did."""
        try:
            self._pg.pipeline_sync()
            self._flush()
            self._poll(select.POLLIN)
            while not self.take():
                self._poll(select.POLLIN)
        except psycopg.OperationalError as exc:
            raise Broken(str(exc)) from exc
        self.outcome()

    def send(self) -> bool:
        """Queue the sync and try to send everything (without waiting); False when the
        socket's buffer is full and :meth:`flush` must be called again once writable."""
        self._pg.pipeline_sync()
        return self.flush()

    def flush(self) -> bool:
        """Send what the socket takes now (without waiting); True when all of it went."""
        return self._pg.flush() == 0

    def take(self) -> bool:
        """Read what the socket holds now (without waiting) and settle the answers read;
        True once the sync's answer came (then :meth:`outcome` tells how it went). The way
        the event loop reads (:mod:`jobctl.store.pg.loopcommit`): call it each time the
        socket is readable. :class:`Broken` on an answer to nothing sent."""
        pg = self._pg
        pg.consume_input()
        while not pg.is_busy():
            res = pg.get_result()
            if res is None:
                if not self._current:
                    return False  # nothing more until the socket has more
                command = next(self._pending, None)
                if command is None:  # an answer to nothing sent: the server's farewell
                    raise Broken(_text_of(self._current[-1]))
                self._failed = self._settle(command, self._current[-1]) or self._failed
                self._current = []
            elif res.status == _SYNC:
                return True
            else:
                self._current.append(res)
        return False

    def wait(self) -> None:
        """Read the rest of the answers, waiting for them (:meth:`run`'s end, after a
        :meth:`send` whose answers the event loop stopped reading: it was cancelled)."""
        try:
            self._flush()
            while not self.take():
                self._poll(select.POLLIN)
        except psycopg.OperationalError as exc:
            raise Broken(str(exc)) from exc
        self.outcome()

    @property
    def socket(self) -> int:
        """The connection's socket (for the event loop's reader)."""
        return int(self._pg.socket)

    def outcome(self) -> None:
        """After :meth:`take` said done: :class:`Failed` if a statement failed."""
        if self._failed is not None:
            raise Failed(self._failed)

    def rows(self, index: int) -> list[tuple[bytes | None, ...]]:
        """The rows of statement ``index`` (its values as the server's text)."""
        res = self._results[index]
        assert res is not None  # run() read it
        return [tuple(res.get_value(r, c) for c in range(res.nfields)) for r in range(res.ntuples)]

    # -- internals ----------------------------------------------------------------------

    def _flush(self) -> None:
        pg = self._pg
        while pg.flush():  # the socket's buffer is full: wait until it takes more
            self._poll(select.POLLOUT | select.POLLIN)
            pg.consume_input()

    def _settle(self, command: tuple[str, bytes] | int, res: pq.abc.PGresult) -> str | None:
        ok = res.status in _OK
        if isinstance(command, int):
            self._results[command] = res
        elif ok:  # a prepare that did not run (an earlier failure) is not remembered
            self._names[command[0]] = command[1]
        if ok or res.status == pq.ExecStatus.PIPELINE_ABORTED:
            return None
        if res.error_field(pq.DiagnosticField.SQLSTATE) == GONE:
            # Our statements were deallocated behind our back: psycopg sends DEALLOCATE
            # ALL after a ROLLBACK on a connection it prepared statements on. Forget
            # them all; this commit goes the checked way, the next prepares them again.
            self._names.clear()
        return _text_of(res)

    def _poll(self, events: int) -> None:
        poll = select.poll()
        poll.register(self._pg.socket, events)
        if not poll.poll(self._wait_ms):
            raise Broken(f"no answer from the server in {self._wait_ms} ms")


def _text_of(res: pq.abc.PGresult) -> str:
    return res.error_message.decode("utf-8", "replace").strip() or "statement failed"


def _texts(params: Sequence[object]) -> list[bytes | None]:
    """The parameters as psycopg's text dumpers send them (``str``, ``int`` and None
    only: anything else is refused, and the commit goes the checked way, psycopg's).
    One loop, no call per value: a commit of eight jobs sends about 200 of them."""
    out: list[bytes | None] = []
    add = out.append
    for value in params:
        kind = type(value)
        if kind is str:
            if "\x00" in value:  # type: ignore[operator]
                raise ValueError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            add(value.encode())  # type: ignore[attr-defined]
        elif value is None:
            add(None)
        elif kind is int:  # a bool is not: psycopg sends it as a boolean
            add(b"%d" % value)  # type: ignore[str-format]
        else:
            raise TypeError(f"no text form for a {kind.__name__} here")
    return out


@lru_cache(maxsize=64)
def native(text: str, names: tuple[str, ...] = ()) -> str:
    """``text`` with psycopg's placeholders made PostgreSQL's: ``%(name)s`` by the order
    of ``names``, ``%s`` in turn, ``%%`` as ``%``."""
    for i, name in enumerate(names):
        text = text.replace(f"%({name})s", f"${i + 1}")
    parts = text.split("%s")
    base = len(names)
    out = "".join(f"{p}${base + i + 1}" for i, p in enumerate(parts[:-1])) + parts[-1]
    return out.replace("%%", "%")


__all__ = ["Broken", "Failed", "Pipe", "native"]

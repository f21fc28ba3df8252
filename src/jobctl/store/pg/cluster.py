"""The ``daemons`` table on PostgreSQL: each daemon's heartbeat row, and the listing
``jobctl status`` shows (see :mod:`jobctl.domain.cluster`).

Heartbeats run on the leases' own pool, outside the group commit, like the lease
heartbeats they ride along with: a busy main pool cannot make a live daemon look gone.
"""

from __future__ import annotations

from datetime import timedelta

from jobctl.domain.cluster import DaemonBeat
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.rows import RowLike, from_ms, ms_to_dt, to_ms

#: Rows of daemons not seen for this long are forgotten (status shows the last day).
FORGET_AFTER = timedelta(days=1)


class PgCluster:
    def __init__(self, db: PgDb) -> None:
        self.db = db

    def beat(self, beat: DaemonBeat) -> None:
        """Write the daemon's row (at start, then with every heartbeat), and forget the
        rows of daemons gone for :data:`FORGET_AFTER` (here, not in :meth:`daemons`: a
        status call stays a read)."""
        params = {
            "owner": beat.owner,
            "host": beat.host,
            "pid": beat.pid,
            "version": beat.version,
            "started_at": to_ms(beat.started_at),
            "now": self.db.now_ms(),
            "running": beat.running,
            "slots": beat.slots,
            "lease_ttl_ms": int(beat.lease_ttl * 1000),
        }
        before = {"before": to_ms(self.db.clock.now() - FORGET_AFTER)}

        def tx(conn: PgConn) -> None:
            conn.execute(self.db.q("daemon_beat"), params)
            conn.execute(self.db.q("prune_daemons"), before)

        self.db.lease_write(tx)

    def stopped(self, owner: str) -> None:
        """A clean stop: shown as stopped, not gone (its jobs were all handed back)."""
        params = {"owner": owner, "now": self.db.now_ms()}
        self.db.lease_write(lambda conn: conn.execute(self.db.q("daemon_stopped"), params))

    def daemons(self) -> list[DaemonBeat]:
        """Every daemon seen in the last day, by host: a read (``status``'s reads share
        one transaction, :meth:`PgDb.together`)."""
        since = {"since": to_ms(self.db.clock.now() - FORGET_AFTER)}
        return self.db.read(
            lambda conn: [_beat(r) for r in conn.execute(self.db.q("daemons"), since)]
        )


def _beat(row: RowLike) -> DaemonBeat:
    return DaemonBeat(
        owner=row["owner"],
        host=row["host"],
        pid=row["pid"],
        version=row["version"],
        started_at=ms_to_dt(row["started_at"]),
        last_seen=ms_to_dt(row["last_seen"]),
        running=row["running"],
        slots=row["slots"],
        lease_ttl=row["lease_ttl_ms"] / 1000,
        stopped_at=from_ms(row["stopped_at"]),
    )


__all__ = ["PgCluster"]

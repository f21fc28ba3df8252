-- 0012: the audit trail. One row per state-changing or denied API request: who (the peer
-- credentials at accept), what (action and target), the answer (status, error code), the
-- request id and when (ms since the epoch). Written by the single writer, riding along with
-- the next group commit; pruned by age (retention.audit) through audit_at.
CREATE TABLE audit (
    id          INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,
    request_id  TEXT NOT NULL,
    uid         INTEGER,
    gid         INTEGER,
    pid         INTEGER,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL DEFAULT '',
    status      INTEGER NOT NULL,
    error       TEXT,
    denied      INTEGER NOT NULL DEFAULT 0 CHECK (denied IN (0, 1))
);
CREATE INDEX audit_at ON audit (at);
CREATE INDEX audit_uid ON audit (uid, id);

-- 0005 (PostgreSQL): the daemons sharing this database. Each writes its row at start and
-- again with every lease heartbeat (ttl/3); `jobctl status` lists them, a daemon silent
-- for 3 lease TTLs shown as gone (jobctl.domain.cluster). Start-up recovery on a host
-- leaves the jobs of a live daemon of that host alone.
CREATE TABLE daemons (
    owner        TEXT    PRIMARY KEY,           -- lease owner: host:pid:tag
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    version      TEXT    NOT NULL,
    started_at   BIGINT  NOT NULL,
    last_seen    BIGINT  NOT NULL,
    running      INTEGER NOT NULL DEFAULT 0 CHECK (running >= 0),
    slots        INTEGER NOT NULL DEFAULT 0 CHECK (slots >= 0),
    lease_ttl_ms BIGINT  NOT NULL CHECK (lease_ttl_ms > 0),
    stopped_at   BIGINT
);
CREATE INDEX daemons_seen ON daemons (last_seen);

-- HTTP webhook jobs (issue 16). A job runs either its command or the request in `http`
-- (one JSON object, jobctl.domain.http; NULL for a command job, whose `command` is '[]'
-- otherwise). An http attempt records the answer's status, the call's latency and the
-- SHA-256 of the exact body bytes sent and signed.
ALTER TABLE jobs ADD COLUMN http TEXT;
ALTER TABLE attempts ADD COLUMN http_status INTEGER;
ALTER TABLE attempts ADD COLUMN latency_ms INTEGER;
ALTER TABLE attempts ADD COLUMN body_sha256 TEXT;

-- Signing secrets of webhook jobs, per owner and name (`jobctl secrets`). `secret` is
-- 'whsec_' + base64 of 32 random bytes; after a rotation `previous` still signs (a
-- second signature) until `previous_until` (ms).
CREATE TABLE webhook_secrets (
    owner_uid      INTEGER NOT NULL,
    name           TEXT    NOT NULL,
    secret         TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    rotated_at     INTEGER,
    previous       TEXT,
    previous_until INTEGER,
    PRIMARY KEY (owner_uid, name)
) WITHOUT ROWID;

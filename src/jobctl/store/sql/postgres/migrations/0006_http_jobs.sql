-- HTTP webhook jobs (issue 16), as in the SQLite layout (its migration 0021_http_jobs).
ALTER TABLE jobs ADD COLUMN http TEXT;
ALTER TABLE attempts ADD COLUMN http_status INTEGER;
ALTER TABLE attempts ADD COLUMN latency_ms BIGINT;
ALTER TABLE attempts ADD COLUMN body_sha256 TEXT;

CREATE TABLE webhook_secrets (
    owner_uid      BIGINT NOT NULL,
    name           TEXT   NOT NULL,
    secret         TEXT   NOT NULL,
    created_at     BIGINT NOT NULL,
    rotated_at     BIGINT,
    previous       TEXT,
    previous_until BIGINT,
    PRIMARY KEY (owner_uid, name)
);

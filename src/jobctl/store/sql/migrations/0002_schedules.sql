-- 0002: schedules (definitions, not rows per occurrence), their skip log, and the link
-- from a job to the schedule occurrence it was materialized for.

CREATE TABLE schedules (
    id              TEXT    PRIMARY KEY,
    name            TEXT    UNIQUE,
    cron            TEXT,
    every_ms        INTEGER CHECK (every_ms IS NULL OR every_ms >= 1000),
    anchor          INTEGER,
    tz              TEXT    NOT NULL,
    template        TEXT    NOT NULL,            -- JSON: the job of every occurrence
    owner_uid       INTEGER NOT NULL,
    misfire         TEXT    NOT NULL CHECK (misfire IN ('skip', 'once', 'all')),
    catch_up_limit  INTEGER NOT NULL CHECK (catch_up_limit >= 1),
    overlap         TEXT    NOT NULL CHECK (overlap IN ('skip', 'queue', 'allow')),
    jitter_ms       INTEGER NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
    paused          INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    deleted_at      INTEGER,
    created_at      INTEGER NOT NULL,
    next_run_at     INTEGER NOT NULL,            -- first nominal time not yet handled
    waiting         INTEGER,                     -- overlap=queue: occurrence waiting its turn
    last_job_id     INTEGER,
    misfire_skips   INTEGER NOT NULL DEFAULT 0,
    overlap_skips   INTEGER NOT NULL DEFAULT 0,
    pause_skips     INTEGER NOT NULL DEFAULT 0,
    last_skip_at    INTEGER,
    last_skip_reason TEXT,
    last_skip_nominal INTEGER,
    CHECK ((cron IS NULL) <> (every_ms IS NULL)),
    CHECK (every_ms IS NULL OR anchor IS NOT NULL)
);

CREATE INDEX schedules_due ON schedules (next_run_at) WHERE paused = 0 AND deleted_at IS NULL;
CREATE INDEX schedules_waiting ON schedules (last_job_id)
    WHERE waiting IS NOT NULL AND paused = 0 AND deleted_at IS NULL;

CREATE TABLE schedule_skips (
    id            INTEGER PRIMARY KEY,
    schedule_id   TEXT    NOT NULL REFERENCES schedules (id),
    reason        TEXT    NOT NULL CHECK (reason IN ('misfire', 'overlap', 'paused')),
    first_nominal INTEGER NOT NULL,
    last_nominal  INTEGER NOT NULL,
    count         INTEGER NOT NULL CHECK (count >= 1),
    recorded_at   INTEGER NOT NULL
);
CREATE INDEX schedule_skips_by_schedule ON schedule_skips (schedule_id, id);

ALTER TABLE jobs ADD COLUMN schedule_id TEXT;
ALTER TABLE jobs ADD COLUMN scheduled_for INTEGER;
CREATE INDEX jobs_schedule ON jobs (schedule_id, id) WHERE schedule_id IS NOT NULL;

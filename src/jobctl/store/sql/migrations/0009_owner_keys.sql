-- 0009: job keys and schedule names are unique per owner, not across all users
-- (docs/security.md). Two users who pick the same --key get two jobs, and an enqueue can
-- never answer with another user's job; two users may both name a schedule "report" (or
-- import the same crontab line), and a name taken by another user is not revealed.
-- SQLite cannot drop a column's UNIQUE constraint, so both tables are rebuilt (SQLite's
-- documented procedure: foreign keys off for this migration, the rows copied as they are,
-- then indexes, triggers and views re-created; attempts, cursors and skips keep pointing
-- at the rebuilt tables). The unique index (owner_uid, key) replaces the one on key
-- alone: the same cost per insert, and a schedule's jobs are still one range of it.
-- jobctl: foreign_keys=off

CREATE TABLE jobs_new (
    id              INTEGER PRIMARY KEY,
    key             TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    command         TEXT    NOT NULL,           -- JSON list of strings
    env             TEXT    NOT NULL,           -- JSON list of [name, value]
    cwd             TEXT    NOT NULL,
    owner_uid       INTEGER NOT NULL,
    priority        INTEGER NOT NULL,
    max_attempts    INTEGER NOT NULL CHECK (max_attempts >= 1),
    timeout_ms      INTEGER CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    backoff_base_ms INTEGER NOT NULL CHECK (backoff_base_ms >= 0),
    backoff_cap_ms  INTEGER NOT NULL CHECK (backoff_cap_ms >= backoff_base_ms),
    created_at      INTEGER NOT NULL,
    run_at          INTEGER NOT NULL,
    status          TEXT    NOT NULL
        CHECK (status IN ('scheduled', 'running', 'succeeded', 'dead', 'cancelled')),
    -- Time bucket of a scheduled job: 0 = waiting for run_at, 1 = due (run_at passed).
    due             INTEGER NOT NULL DEFAULT 0 CHECK (due IN (0, 1)),
    attempt         INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    failures        INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    generation      INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    lease_owner     TEXT,
    lease_until     INTEGER,
    finished_at     INTEGER,
    last_error      TEXT,
    dead_reason     TEXT,
    schedule_id     TEXT,
    scheduled_for   INTEGER,
    sort_key        INTEGER NOT NULL DEFAULT 0,
    retry_on        TEXT,
    no_retry_on     TEXT,
    CHECK ((status = 'running') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK (status = 'scheduled' OR due = 0),
    CHECK ((status = 'dead') = (dead_reason IS NOT NULL)),
    CHECK ((status IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL))
);

INSERT INTO jobs_new (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,
    max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms, created_at, run_at, status,
    due, attempt, failures, generation, lease_owner, lease_until, finished_at, last_error,
    dead_reason, schedule_id, scheduled_for, sort_key, retry_on, no_retry_on)
SELECT id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,
    max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms, created_at, run_at, status,
    due, attempt, failures, generation, lease_owner, lease_until, finished_at, last_error,
    dead_reason, schedule_id, scheduled_for, sort_key, retry_on, no_retry_on
FROM jobs;

DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

CREATE UNIQUE INDEX jobs_owner_key ON jobs (owner_uid, key);
CREATE INDEX jobs_future ON jobs (run_at) WHERE status = 'scheduled' AND due = 0;
CREATE INDEX jobs_due ON jobs (queue, owner_uid, sort_key, id)
    WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_due_age ON jobs (queue, run_at) WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status = 'running';
CREATE INDEX jobs_status ON jobs (status, id);
CREATE INDEX jobs_queue ON jobs (queue, id);
CREATE INDEX jobs_dead ON jobs (finished_at) WHERE status = 'dead';
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, due, queue ON jobs
WHEN OLD.status <> NEW.status OR OLD.due <> NEW.due OR OLD.queue <> NEW.queue BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE queue = OLD.queue AND owner_uid = OLD.owner_uid
      AND bucket = CASE WHEN OLD.due = 1 THEN 'due' ELSE OLD.status END;
    INSERT INTO job_counts (queue, owner_uid, bucket, n)
    VALUES (NEW.queue, NEW.owner_uid, CASE WHEN NEW.due = 1 THEN 'due' ELSE NEW.status END, 1)
    ON CONFLICT (queue, owner_uid, bucket) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE queue = OLD.queue AND owner_uid = OLD.owner_uid
      AND bucket = CASE WHEN OLD.due = 1 THEN 'due' ELSE OLD.status END;
END;

-- The lifecycle of jobctl.domain.states.TRANSITIONS (as in 0001; tests/unit/test_states.py).
CREATE TRIGGER jobs_transition BEFORE UPDATE OF status ON jobs
WHEN OLD.status <> NEW.status AND OLD.status || '>' || NEW.status NOT IN (
    'scheduled>running', 'scheduled>cancelled',
    'running>succeeded', 'running>scheduled', 'running>dead', 'running>cancelled',
    'dead>scheduled'
) BEGIN
    SELECT RAISE(ABORT, 'illegal job transition');
END;

-- Schedule names: unique per owner. The view `schedules` (0008) is dropped first (a
-- rename checks the views that name a table) and re-created as it was.
DROP VIEW schedules;

CREATE TABLE schedule_defs_new (
    id              TEXT    PRIMARY KEY,
    name            TEXT,
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
    created_at      INTEGER NOT NULL,
    misfire_skips   INTEGER NOT NULL DEFAULT 0,
    overlap_skips   INTEGER NOT NULL DEFAULT 0,
    pause_skips     INTEGER NOT NULL DEFAULT 0,
    last_skip_at    INTEGER,
    last_skip_reason TEXT,
    last_skip_nominal INTEGER,
    CHECK ((cron IS NULL) <> (every_ms IS NULL)),
    CHECK (every_ms IS NULL OR anchor IS NOT NULL)
);

INSERT INTO schedule_defs_new (id, name, cron, every_ms, anchor, tz, template, owner_uid,
    misfire, catch_up_limit, overlap, jitter_ms, created_at, misfire_skips, overlap_skips,
    pause_skips, last_skip_at, last_skip_reason, last_skip_nominal)
SELECT id, name, cron, every_ms, anchor, tz, template, owner_uid,
    misfire, catch_up_limit, overlap, jitter_ms, created_at, misfire_skips, overlap_skips,
    pause_skips, last_skip_at, last_skip_reason, last_skip_nominal
FROM schedule_defs;

DROP TABLE schedule_defs;
ALTER TABLE schedule_defs_new RENAME TO schedule_defs;

-- Name first: a lookup by name alone (in-process callers) uses it as well.
CREATE UNIQUE INDEX schedule_defs_name ON schedule_defs (name, owner_uid);
CREATE INDEX schedules_created ON schedule_defs (created_at, id);

CREATE VIEW schedules AS
SELECT d.id, d.name, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.paused, c.deleted_at, d.created_at,
       c.next_run_at, c.waiting, c.last_job_id, d.misfire_skips, d.overlap_skips,
       d.pause_skips, d.last_skip_at, d.last_skip_reason, d.last_skip_nominal
FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id;

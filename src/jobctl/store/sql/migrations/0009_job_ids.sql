-- 0009: job ids are never reused. Ids were max(id) + 1, so after the newest job was
-- purged (`dlq purge`) or every job pruned, the next job got an id seen before, and a stale
-- id in someone's notes named another job (and its log path collided with an old file).
-- AUTOINCREMENT keeps the highest id ever given in sqlite_sequence; the writer reads that
-- (query max_job_id), so ids the store assigns itself never go back either.
--
-- A column's AUTOINCREMENT cannot be added in place: the table is rebuilt as SQLite's
-- ALTER TABLE documentation prescribes (new table, copy, drop, rename; migrate() runs
-- every migration with foreign keys off and checks them before it commits, so dropping
-- `jobs` does not cascade to `attempts`, whose REFERENCES jobs (id) names the new table
-- once it is renamed). Every index and trigger `jobs` had after 0008 is created again,
-- word for word: the unique key index (sqlite_autoindex_jobs_1, which queries name) comes
-- back with the table. A test compares them with a database at 0008.

CREATE TABLE jobs_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    key             TEXT    NOT NULL UNIQUE,
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
    -- Claims read only the small due bucket, ordered by priority; the timer moves jobs
    -- from the future bucket as their time comes.  See docs/architecture.md.
    due             INTEGER NOT NULL DEFAULT 0 CHECK (due IN (0, 1)),
    attempt         INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    failures        INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    generation      INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    lease_owner     TEXT,
    lease_until     INTEGER,
    finished_at     INTEGER,
    last_error      TEXT,
    dead_reason     TEXT,
    schedule_id     TEXT,                       -- 0002
    scheduled_for   INTEGER,                    -- 0002
    sort_key        INTEGER NOT NULL DEFAULT 0, -- 0003: run_at - priority * 300 s
    retry_on        TEXT,                       -- 0003: JSON list of exit codes
    no_retry_on     TEXT,                       -- 0003: JSON list of exit codes
    CHECK ((status = 'running') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK (status = 'scheduled' OR due = 0),
    CHECK ((status = 'dead') = (dead_reason IS NOT NULL)),
    CHECK ((status IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL))
);

INSERT INTO jobs_new (id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,
    max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms, created_at, run_at, status, due,
    attempt, failures, generation, lease_owner, lease_until, finished_at, last_error,
    dead_reason, schedule_id, scheduled_for, sort_key, retry_on, no_retry_on)
SELECT id, key, fingerprint, queue, command, env, cwd, owner_uid, priority,
    max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms, created_at, run_at, status, due,
    attempt, failures, generation, lease_owner, lease_until, finished_at, last_error,
    dead_reason, schedule_id, scheduled_for, sort_key, retry_on, no_retry_on
FROM jobs ORDER BY id;

DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

-- 0001
CREATE INDEX jobs_future ON jobs (run_at) WHERE status = 'scheduled' AND due = 0;
CREATE INDEX jobs_due_age ON jobs (queue, run_at) WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status = 'running';
CREATE INDEX jobs_status ON jobs (status, id);
CREATE INDEX jobs_queue ON jobs (queue, id);

-- The lifecycle of jobctl.domain.states.TRANSITIONS; tests/unit/test_states.py checks
-- that this list and the code agree pair by pair.
CREATE TRIGGER jobs_transition BEFORE UPDATE OF status ON jobs
WHEN OLD.status <> NEW.status AND OLD.status || '>' || NEW.status NOT IN (
    'scheduled>running', 'scheduled>cancelled',
    'running>succeeded', 'running>scheduled', 'running>dead', 'running>cancelled',
    'dead>scheduled'
) BEGIN
    SELECT RAISE(ABORT, 'illegal job transition');
END;

-- 0003
CREATE INDEX jobs_due ON jobs (queue, owner_uid, sort_key, id)
    WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_dead ON jobs (finished_at) WHERE status = 'dead';

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

-- 0004
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;

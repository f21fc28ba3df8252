-- 0001: jobs, attempts, status counters, lifecycle trigger.
-- Times are integer milliseconds since the Unix epoch, UTC.

CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY,
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
    CHECK ((status = 'running') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK (status = 'scheduled' OR due = 0),
    CHECK ((status = 'dead') = (dead_reason IS NOT NULL)),
    CHECK ((status IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL))
);

CREATE INDEX jobs_future ON jobs (run_at) WHERE status = 'scheduled' AND due = 0;
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id) WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_due_age ON jobs (queue, run_at) WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status = 'running';
CREATE INDEX jobs_status ON jobs (status, id);
CREATE INDEX jobs_queue ON jobs (queue, id);

CREATE TABLE attempts (
    job_id      INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    number      INTEGER NOT NULL CHECK (number >= 1),
    generation  INTEGER NOT NULL,
    lease_owner TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT CHECK (outcome IS NULL OR outcome IN
        ('succeeded', 'failed', 'timeout', 'lease_expired', 'interrupted', 'cancelled')),
    exit_code   INTEGER,
    error       TEXT,
    output_tail TEXT NOT NULL DEFAULT '',
    log_path    TEXT,
    pid         INTEGER,
    pid_start   INTEGER,                      -- process start time (clock ticks), guards pid reuse
    CHECK ((outcome IS NULL) = (finished_at IS NULL)),
    PRIMARY KEY (job_id, number)
) WITHOUT ROWID;

-- Exact counts per queue and bucket, kept by triggers in the same transaction, so status
-- stays O(queues) however many jobs there are.
CREATE TABLE job_counts (
    queue  TEXT    NOT NULL,
    bucket TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (queue, bucket)
) WITHOUT ROWID;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (queue, bucket, n)
    VALUES (NEW.queue, CASE WHEN NEW.due = 1 THEN 'due' ELSE NEW.status END, 1)
    ON CONFLICT (queue, bucket) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, due, queue ON jobs
WHEN OLD.status <> NEW.status OR OLD.due <> NEW.due OR OLD.queue <> NEW.queue BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE queue = OLD.queue AND bucket = CASE WHEN OLD.due = 1 THEN 'due' ELSE OLD.status END;
    INSERT INTO job_counts (queue, bucket, n)
    VALUES (NEW.queue, CASE WHEN NEW.due = 1 THEN 'due' ELSE NEW.status END, 1)
    ON CONFLICT (queue, bucket) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE queue = OLD.queue AND bucket = CASE WHEN OLD.due = 1 THEN 'due' ELSE OLD.status END;
END;

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

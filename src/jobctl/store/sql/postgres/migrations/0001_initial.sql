-- 0001 (PostgreSQL): jobs, attempts, queues, counters, the audit trail.
-- Column for column the SQLite layout (times in integer milliseconds UTC, flags 0/1, JSON
-- as text), so one row decoder (jobctl.store.jobrow) serves both backends.

CREATE SEQUENCE jobs_id_seq;  -- ids are never reused, whatever is deleted

CREATE TABLE jobs (
    id              BIGINT  PRIMARY KEY,
    key             TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    command         TEXT    NOT NULL,           -- JSON list of strings
    env             TEXT    NOT NULL,           -- JSON list of [name, value]
    cwd             TEXT    NOT NULL,
    owner_uid       BIGINT  NOT NULL,
    priority        INTEGER NOT NULL,
    max_attempts    INTEGER NOT NULL CHECK (max_attempts >= 1),
    timeout_ms      BIGINT  CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    backoff_base_ms BIGINT  NOT NULL CHECK (backoff_base_ms >= 0),
    backoff_cap_ms  BIGINT  NOT NULL CHECK (backoff_cap_ms >= backoff_base_ms),
    created_at      BIGINT  NOT NULL,
    run_at          BIGINT  NOT NULL,
    status          TEXT    NOT NULL
        CHECK (status IN ('scheduled', 'running', 'succeeded', 'dead', 'cancelled')),
    due             SMALLINT NOT NULL DEFAULT 0 CHECK (due IN (0, 1)),
    attempt         INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    failures        INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    generation      BIGINT  NOT NULL DEFAULT 0 CHECK (generation >= 0),
    lease_owner     TEXT,
    lease_until     BIGINT,
    finished_at     BIGINT,
    last_error      TEXT,
    dead_reason     TEXT,
    schedule_id     TEXT,
    scheduled_for   BIGINT,
    sort_key        BIGINT  NOT NULL DEFAULT 0,
    retry_on        TEXT,
    no_retry_on     TEXT,
    CHECK ((status = 'running') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK (status = 'scheduled' OR due = 0),
    CHECK ((status = 'dead') = (dead_reason IS NOT NULL)),
    CHECK ((status IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL))
);
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

-- The lifecycle, as in SQLite's jobs_transition trigger and jobctl.domain.states.
CREATE FUNCTION jobs_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> NEW.status AND OLD.status || '>' || NEW.status NOT IN (
        'scheduled>running', 'scheduled>cancelled',
        'running>succeeded', 'running>scheduled', 'running>dead', 'running>cancelled',
        'dead>scheduled') THEN
        RAISE EXCEPTION 'illegal job transition' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_transition BEFORE UPDATE OF status ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_transition();

CREATE TABLE attempts (
    job_id        BIGINT  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    number        INTEGER NOT NULL CHECK (number >= 1),
    generation    BIGINT  NOT NULL,
    lease_owner   TEXT    NOT NULL,
    started_at    BIGINT  NOT NULL,
    finished_at   BIGINT,
    outcome       TEXT CHECK (outcome IS NULL OR outcome IN
        ('succeeded', 'failed', 'timeout', 'lease_expired', 'interrupted', 'cancelled')),
    exit_code     INTEGER,
    error         TEXT,
    output_tail   TEXT    NOT NULL DEFAULT '',
    log_path      TEXT,
    pid           INTEGER,
    pid_start     BIGINT,
    crash_suspect SMALLINT CHECK (crash_suspect IN (0, 1)),
    log_bytes     BIGINT  NOT NULL DEFAULT 0 CHECK (log_bytes >= 0),
    CHECK ((outcome IS NULL) = (finished_at IS NULL)),
    PRIMARY KEY (job_id, number)
);
CREATE INDEX attempts_generation ON attempts (job_id, generation);
CREATE INDEX attempts_crash_suspects ON attempts (lease_owner) WHERE crash_suspect = 1;

-- Counts per lane (queue, owner) and bucket ('due' for a due scheduled job, else its
-- status), kept by statement-level triggers: one upsert per lane per statement, in lane
-- order (two statements never take two counters in opposite orders: no deadlock).
CREATE TABLE job_counts (
    queue     TEXT    NOT NULL,
    owner_uid BIGINT  NOT NULL,
    bucket    TEXT    NOT NULL,
    n         BIGINT  NOT NULL,
    PRIMARY KEY (queue, owner_uid, bucket)
);

CREATE FUNCTION job_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_counts (queue, owner_uid, bucket, n)
        SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END, count(*)
        FROM new_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (queue, owner_uid, bucket) DO UPDATE SET n = job_counts.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_counts (queue, owner_uid, bucket, n)
        SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END, -count(*)
        FROM old_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (queue, owner_uid, bucket) DO UPDATE SET n = job_counts.n + excluded.n;
    ELSE
        INSERT INTO job_counts (queue, owner_uid, bucket, n)
        SELECT queue, owner_uid, bucket, sum(d) FROM (
            SELECT o.queue, o.owner_uid,
                   CASE WHEN o.due = 1 THEN 'due' ELSE o.status END AS bucket, -1 AS d
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.status <> n.status OR o.due <> n.due OR o.queue <> n.queue
            UNION ALL
            SELECT n.queue, n.owner_uid,
                   CASE WHEN n.due = 1 THEN 'due' ELSE n.status END, 1
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.status <> n.status OR o.due <> n.due OR o.queue <> n.queue
        ) changes GROUP BY 1, 2, 3 HAVING sum(d) <> 0 ORDER BY 1, 2, 3
        ON CONFLICT (queue, owner_uid, bucket) DO UPDATE SET n = job_counts.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION job_counts_apply();
CREATE TRIGGER jobs_count_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_apply();
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION job_counts_apply();

-- Named queues; a queue without a row has no limits. A claim locks the rows of the
-- limited queues it takes from: limits hold cluster-wide.
CREATE TABLE queues (
    name        TEXT    PRIMARY KEY,
    concurrency INTEGER CHECK (concurrency IS NULL OR concurrency >= 1),
    rate        DOUBLE PRECISION CHECK (rate IS NULL OR rate > 0),   -- jobs per second
    burst       INTEGER NOT NULL DEFAULT 1 CHECK (burst >= 1),
    weight      INTEGER NOT NULL DEFAULT 1 CHECK (weight >= 1),
    paused      SMALLINT NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    tokens      DOUBLE PRECISION NOT NULL DEFAULT 1,
    tokens_at   BIGINT  NOT NULL DEFAULT 0
);

-- Bytes of attempt logs per owner, kept when an attempt's size is set or its job deleted.
CREATE TABLE log_usage (
    owner_uid BIGINT PRIMARY KEY,
    bytes     BIGINT NOT NULL DEFAULT 0
);
CREATE FUNCTION jobs_log_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE log_usage
    SET bytes = bytes - (SELECT coalesce(sum(log_bytes), 0) FROM attempts WHERE job_id = OLD.id)
    WHERE owner_uid = OLD.owner_uid;
    RETURN OLD;
END $$;
CREATE TRIGGER jobs_log_bytes BEFORE DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_log_bytes();
CREATE FUNCTION attempts_log_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO log_usage (owner_uid, bytes)
    SELECT owner_uid, NEW.log_bytes - OLD.log_bytes FROM jobs WHERE id = NEW.job_id
    ON CONFLICT (owner_uid) DO UPDATE SET bytes = log_usage.bytes + excluded.bytes;
    RETURN NULL;
END $$;
CREATE TRIGGER attempts_log_bytes AFTER UPDATE OF log_bytes ON attempts
    FOR EACH ROW WHEN (NEW.log_bytes IS DISTINCT FROM OLD.log_bytes)
    EXECUTE FUNCTION attempts_log_bytes();

CREATE TABLE audit (
    id          BIGSERIAL PRIMARY KEY,
    at          BIGINT  NOT NULL,
    request_id  TEXT    NOT NULL,
    uid         BIGINT,
    gid         BIGINT,
    pid         INTEGER,
    action      TEXT    NOT NULL,
    target      TEXT    NOT NULL DEFAULT '',
    status      INTEGER NOT NULL,
    error       TEXT,
    denied      SMALLINT NOT NULL DEFAULT 0 CHECK (denied IN (0, 1))
);
CREATE INDEX audit_at ON audit (at);
CREATE INDEX audit_uid ON audit (uid, id);

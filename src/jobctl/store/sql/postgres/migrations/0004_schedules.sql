-- 0004 (PostgreSQL): schedules, as the SQLite layout has them after its migrations 0002-0018:
-- a definition row (schedule_defs) and a narrow cursor row (schedule_cursors) per schedule,
-- read together through the view `schedules`; the skip log, the edit history and the
-- per-owner counters (schedule_counts) kept by triggers in the transaction of every change.
-- Ids and names compare bytewise (COLLATE "C") whatever the database's collation, so pages
-- and lookups order the same on every server.

CREATE TABLE schedule_defs (
    id              TEXT COLLATE "C" PRIMARY KEY,
    name            TEXT COLLATE "C",          -- NULL once deleted (deleted_name keeps it)
    deleted_name    TEXT,
    cron            TEXT,
    every_ms        BIGINT  CHECK (every_ms IS NULL OR every_ms >= 1000),
    anchor          BIGINT,
    tz              TEXT    NOT NULL,
    template        TEXT    NOT NULL,           -- JSON: the job of every occurrence
    owner_uid       BIGINT  NOT NULL,
    misfire         TEXT    NOT NULL CHECK (misfire IN ('skip', 'once', 'all')),
    catch_up_limit  INTEGER NOT NULL CHECK (catch_up_limit >= 1),
    overlap         TEXT    NOT NULL CHECK (overlap IN ('skip', 'queue', 'allow')),
    jitter_ms       BIGINT  NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
    created_at      BIGINT  NOT NULL,
    misfire_skips   BIGINT  NOT NULL DEFAULT 0,
    overlap_skips   BIGINT  NOT NULL DEFAULT 0,
    pause_skips     BIGINT  NOT NULL DEFAULT 0,
    last_skip_at    BIGINT,
    last_skip_reason TEXT,
    last_skip_nominal BIGINT,
    CHECK ((cron IS NULL) <> (every_ms IS NULL)),
    CHECK (every_ms IS NULL OR anchor IS NOT NULL)
);
CREATE UNIQUE INDEX schedule_defs_name ON schedule_defs (name, owner_uid);
CREATE INDEX schedules_created ON schedule_defs (created_at, id);
CREATE INDEX schedule_defs_owner ON schedule_defs (owner_uid, created_at, id);

-- The materializer's row: it locks it (FOR UPDATE SKIP LOCKED) and moves it by
-- compare-and-set in the transaction that creates the occurrence's job.
CREATE TABLE schedule_cursors (
    id            TEXT COLLATE "C" PRIMARY KEY REFERENCES schedule_defs (id),
    paused        SMALLINT NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    deleted_at    BIGINT,
    next_run_at   BIGINT  NOT NULL,             -- first nominal time not yet handled
    waiting       BIGINT,                       -- overlap=queue: occurrence waiting its turn
    last_job_id   BIGINT,
    broken_at     BIGINT,                       -- NULL: not broken
    broken_reason TEXT
);
CREATE INDEX schedule_cursors_due ON schedule_cursors (next_run_at)
    WHERE paused = 0 AND deleted_at IS NULL AND broken_at IS NULL;
CREATE INDEX schedule_cursors_waiting ON schedule_cursors (last_job_id)
    WHERE waiting IS NOT NULL AND paused = 0 AND deleted_at IS NULL AND broken_at IS NULL;

CREATE VIEW schedules AS
SELECT d.id, coalesce(d.name, d.deleted_name) AS name, d.cron, d.every_ms, d.anchor, d.tz,
       d.template, d.owner_uid, d.misfire, d.catch_up_limit, d.overlap, d.jitter_ms, c.paused,
       c.deleted_at, d.created_at, c.next_run_at, c.waiting, c.last_job_id, d.misfire_skips,
       d.overlap_skips, d.pause_skips, d.last_skip_at, d.last_skip_reason, d.last_skip_nominal,
       c.broken_at, c.broken_reason
FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id;

CREATE TABLE schedule_skips (
    id            BIGSERIAL PRIMARY KEY,
    schedule_id   TEXT COLLATE "C" NOT NULL REFERENCES schedule_defs (id),
    reason        TEXT    NOT NULL CHECK (reason IN ('misfire', 'overlap', 'paused')),
    first_nominal BIGINT  NOT NULL,
    last_nominal  BIGINT  NOT NULL,
    count         BIGINT  NOT NULL CHECK (count >= 1),
    recorded_at   BIGINT  NOT NULL
);
CREATE INDEX schedule_skips_by_schedule ON schedule_skips (schedule_id, id);

CREATE TABLE schedule_edits (
    id             BIGSERIAL PRIMARY KEY,
    schedule_id    TEXT COLLATE "C" NOT NULL REFERENCES schedule_defs (id),
    edited_at      BIGINT  NOT NULL,
    editor_uid     BIGINT  NOT NULL,
    changes        TEXT    NOT NULL,            -- JSON object: field -> [before, after]
    next_before    BIGINT  NOT NULL,
    next_after     BIGINT  NOT NULL,
    cleared_broken SMALLINT NOT NULL DEFAULT 0 CHECK (cleared_broken IN (0, 1))
);
CREATE INDEX schedule_edits_by_schedule ON schedule_edits (schedule_id, id);

-- A schedule's jobs, newest first (`schedules show`). SQLite reads them as a range of the
-- key index; here the key index follows the database's collation, so a range of it is not
-- a prefix: a partial index of its own instead.
CREATE INDEX jobs_schedule ON jobs (schedule_id, id) WHERE schedule_id IS NOT NULL;

-- Per-owner totals (SQLite's 0018): live, paused, broken (live, not paused, broken) and the
-- skip counters summed over live schedules. The triggers fire only when a cursor's
-- paused/deleted/broken state or a definition's skip counters change, never on the
-- materializer's advance.
CREATE TABLE schedule_counts (
    owner_uid     BIGINT PRIMARY KEY,
    live          BIGINT NOT NULL DEFAULT 0,
    paused        BIGINT NOT NULL DEFAULT 0,
    broken        BIGINT NOT NULL DEFAULT 0,
    misfire_skips BIGINT NOT NULL DEFAULT 0,
    overlap_skips BIGINT NOT NULL DEFAULT 0,
    pause_skips   BIGINT NOT NULL DEFAULT 0
);

-- What one cursor row adds to its owner's counts (0 for a deleted schedule).
CREATE FUNCTION schedule_counts_row(c schedule_cursors, sign INTEGER) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF c.deleted_at IS NOT NULL THEN
        RETURN;
    END IF;
    INSERT INTO schedule_counts AS s (owner_uid, live, paused, broken, misfire_skips,
                                      overlap_skips, pause_skips)
    SELECT d.owner_uid, sign, sign * c.paused,
           sign * (CASE WHEN c.paused = 0 AND c.broken_at IS NOT NULL THEN 1 ELSE 0 END),
           sign * d.misfire_skips, sign * d.overlap_skips, sign * d.pause_skips
    FROM schedule_defs d WHERE d.id = c.id
    ON CONFLICT (owner_uid) DO UPDATE SET
        live = s.live + excluded.live, paused = s.paused + excluded.paused,
        broken = s.broken + excluded.broken,
        misfire_skips = s.misfire_skips + excluded.misfire_skips,
        overlap_skips = s.overlap_skips + excluded.overlap_skips,
        pause_skips = s.pause_skips + excluded.pause_skips;
END $$;

CREATE FUNCTION schedule_counts_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM schedule_counts_row(OLD, -1);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM schedule_counts_row(NEW, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER schedule_counts_insert AFTER INSERT ON schedule_cursors
    FOR EACH ROW EXECUTE FUNCTION schedule_counts_cursor();
CREATE TRIGGER schedule_counts_state AFTER UPDATE OF paused, deleted_at, broken_at
    ON schedule_cursors FOR EACH ROW
    WHEN (OLD.paused IS DISTINCT FROM NEW.paused
       OR (OLD.deleted_at IS NULL) IS DISTINCT FROM (NEW.deleted_at IS NULL)
       OR (OLD.broken_at IS NULL) IS DISTINCT FROM (NEW.broken_at IS NULL))
    EXECUTE FUNCTION schedule_counts_cursor();
CREATE TRIGGER schedule_counts_delete AFTER DELETE ON schedule_cursors
    FOR EACH ROW EXECUTE FUNCTION schedule_counts_cursor();

CREATE FUNCTION schedule_counts_skips() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE schedule_counts
    SET misfire_skips = misfire_skips + NEW.misfire_skips - OLD.misfire_skips,
        overlap_skips = overlap_skips + NEW.overlap_skips - OLD.overlap_skips,
        pause_skips = pause_skips + NEW.pause_skips - OLD.pause_skips
    WHERE owner_uid = NEW.owner_uid
      AND EXISTS (SELECT 1 FROM schedule_cursors WHERE id = NEW.id AND deleted_at IS NULL);
    RETURN NULL;
END $$;
CREATE TRIGGER schedule_counts_skips AFTER UPDATE OF misfire_skips, overlap_skips, pause_skips
    ON schedule_defs FOR EACH ROW
    WHEN (NEW.misfire_skips IS DISTINCT FROM OLD.misfire_skips
       OR NEW.overlap_skips IS DISTINCT FROM OLD.overlap_skips
       OR NEW.pause_skips IS DISTINCT FROM OLD.pause_skips)
    EXECUTE FUNCTION schedule_counts_skips();

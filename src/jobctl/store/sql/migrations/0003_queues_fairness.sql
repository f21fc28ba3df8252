-- 0003: fair dispatch (lanes by queue and owner, priority with aging as a sort key),
-- named queues with limits, retry-on exit codes, poison detection.

ALTER TABLE jobs ADD COLUMN sort_key INTEGER NOT NULL DEFAULT 0;   -- run_at - priority * 300 s
ALTER TABLE jobs ADD COLUMN retry_on TEXT;                         -- JSON list of exit codes
ALTER TABLE jobs ADD COLUMN no_retry_on TEXT;                      -- JSON list of exit codes
UPDATE jobs SET sort_key = run_at - priority * 300000;

DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (queue, owner_uid, sort_key, id)
    WHERE status = 'scheduled' AND due = 1;
CREATE INDEX jobs_dead ON jobs (finished_at) WHERE status = 'dead';

-- Named queues; a queue without a row has no limits.
CREATE TABLE queues (
    name        TEXT    PRIMARY KEY,
    concurrency INTEGER CHECK (concurrency IS NULL OR concurrency >= 1),
    rate        REAL    CHECK (rate IS NULL OR rate > 0),   -- jobs per second
    burst       INTEGER NOT NULL DEFAULT 1 CHECK (burst >= 1),
    weight      INTEGER NOT NULL DEFAULT 1 CHECK (weight >= 1),
    paused      INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    tokens      REAL    NOT NULL DEFAULT 1,
    tokens_at   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Counts per lane (queue, owner) and bucket; status sums them per queue.
DROP TRIGGER jobs_count_insert;
DROP TRIGGER jobs_count_update;
DROP TRIGGER jobs_count_delete;
DROP TABLE job_counts;
CREATE TABLE job_counts (
    queue     TEXT    NOT NULL,
    owner_uid INTEGER NOT NULL,
    bucket    TEXT    NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (queue, owner_uid, bucket)
) WITHOUT ROWID;
INSERT INTO job_counts (queue, owner_uid, bucket, n)
SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END, count(*)
FROM jobs GROUP BY 1, 2, 3;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (queue, owner_uid, bucket, n)
    VALUES (NEW.queue, NEW.owner_uid, CASE WHEN NEW.due = 1 THEN 'due' ELSE NEW.status END, 1)
    ON CONFLICT (queue, owner_uid, bucket) DO UPDATE SET n = n + 1;
END;

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

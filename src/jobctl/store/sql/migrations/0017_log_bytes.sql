-- 0017: log bytes accounted (issue 12 item 5). Each attempt records the size of its log
-- file when it ended; log_usage keeps a running total per owner, maintained by triggers
-- in the same transaction as the change, so `status` and the jobctl_log_bytes metric read
-- a row per owner instead of summing attempts or stat-ing files. Every way a job leaves
-- the store (prune, dead-letter purge) goes through a DELETE on jobs, which subtracts its
-- attempts' bytes. Attempts that ended before this migration count 0. A later migration
-- that rebuilds jobs or attempts (DROP TABLE drops their triggers) must create these again.
ALTER TABLE attempts ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0 CHECK (log_bytes >= 0);

CREATE TABLE log_usage (
    owner_uid INTEGER PRIMARY KEY,
    bytes     INTEGER NOT NULL DEFAULT 0
);

CREATE TRIGGER attempts_log_bytes AFTER UPDATE OF log_bytes ON attempts
WHEN NEW.log_bytes IS NOT OLD.log_bytes
BEGIN
    INSERT INTO log_usage (owner_uid, bytes)
    SELECT owner_uid, NEW.log_bytes - OLD.log_bytes FROM jobs WHERE id = NEW.job_id
    ON CONFLICT (owner_uid) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER jobs_log_bytes BEFORE DELETE ON jobs
BEGIN
    UPDATE log_usage
    SET bytes = bytes - (SELECT coalesce(sum(log_bytes), 0) FROM attempts WHERE job_id = OLD.id)
    WHERE owner_uid = OLD.owner_uid;
END;

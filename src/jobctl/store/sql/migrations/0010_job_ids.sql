-- 0010: job ids are never reused. Ids were max(id) + 1, so after the newest job was
-- purged (`dlq purge`) or every job pruned, the next job got an id seen before, and a stale
-- id in someone's notes named another job (and its log path collided with an old file).
--
-- The highest id ever given is kept in this one-row table; the writer numbers a batch from
-- it (query max_job_id) and raises it once per batch (raise_job_id_high, in the same
-- transaction), in jobctl.store.inserts._write, the one place job rows are inserted.
-- AUTOINCREMENT would keep the same mark, but it reads and rewrites sqlite_sequence for
-- every inserted row (measured: +0.6 us of CPU per job through SqliteStore.insert, ~3%),
-- and adding it means rebuilding the jobs table; this costs one small update per batch.
CREATE TABLE job_id_high (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq INTEGER NOT NULL                       -- the highest job id ever given
);
INSERT INTO job_id_high (one, seq) SELECT 1, coalesce(max(id), 0) FROM jobs;

-- Payload jobs and worker queues (issue 16), as in the SQLite layout (its migration
-- 0023_worker_jobs).
ALTER TABLE jobs ADD COLUMN payload TEXT;
ALTER TABLE queues ADD COLUMN workers TEXT;

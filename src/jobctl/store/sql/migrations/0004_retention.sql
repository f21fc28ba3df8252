-- 0004: retention. Finished jobs are found by age without scanning the live ones.
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;

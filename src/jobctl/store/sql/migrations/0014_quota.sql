-- 0014: per-owner quotas. The schedules quota counts one owner's live schedules when
-- one is created; this index makes that count touch only that owner's schedules.
-- Job quotas need no schema: they read the per-lane counters of job_counts (0003).
CREATE INDEX schedule_defs_owner ON schedule_defs (owner_uid);

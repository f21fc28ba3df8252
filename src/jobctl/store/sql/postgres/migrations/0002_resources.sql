-- Resource limits of a job's command (nice, memory_max, cpu_quota; issue 12), as in the
-- SQLite layout (its migration 0019): one JSON object, NULL for none (most jobs).
ALTER TABLE jobs ADD COLUMN resources TEXT;

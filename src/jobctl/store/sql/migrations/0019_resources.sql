-- Resource limits of a job's command (nice, memory_max, cpu_quota; issue 12): one JSON
-- object, NULL for none (most jobs), read by jobctl.domain.resources.
ALTER TABLE jobs ADD COLUMN resources TEXT;

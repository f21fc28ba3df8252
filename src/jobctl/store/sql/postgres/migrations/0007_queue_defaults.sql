-- Per-queue defaults (issue 12), as in the SQLite layout (its migration 0022): the
-- resource limits (a JSON object text like jobs.resources, NULL: none) and the failure
-- notifier (NULL: none) a queue's jobs get when they give none of their own.
ALTER TABLE queues ADD COLUMN resources TEXT;
ALTER TABLE queues ADD COLUMN on_failure TEXT;

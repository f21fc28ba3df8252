-- Per-queue defaults (issue 12): the resource limits (a JSON object like jobs.resources,
-- NULL: none) and the failure notifier (NULL: none) a queue's jobs get when they give
-- none of their own (domain/queue_defaults.py). Set by `jobctl queues set` (admins).
ALTER TABLE queues ADD COLUMN resources TEXT;
ALTER TABLE queues ADD COLUMN on_failure TEXT;

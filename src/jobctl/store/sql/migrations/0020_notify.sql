-- Failure notification (issue 12): the job's notifier command line (NULL: the queue's or
-- the daemon's default, if any) and what the notification did once the job ended dead
-- (a JSON object text, NULL: none ran), written by engine/notifier.py.
ALTER TABLE jobs ADD COLUMN on_failure TEXT;
ALTER TABLE jobs ADD COLUMN notified TEXT;

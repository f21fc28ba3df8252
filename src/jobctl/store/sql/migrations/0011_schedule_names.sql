-- 0011: a deleted schedule releases its name. Names are UNIQUE in schedule_defs, and a
-- deleted schedule kept its row (its history stays) and so its name: creating a schedule
-- under that name again failed on the constraint (HTTP 500), and so did importing a crontab
-- again after deleting one of its schedules. Deleting now moves the name to
-- `deleted_name`; the constraint keeps holding for live names, and the view `schedules`
-- still shows a deleted schedule under the name it had. Lookups by name read
-- schedule_defs.name (query schedule_by_name), which only live schedules have.

ALTER TABLE schedule_defs ADD COLUMN deleted_name TEXT;

UPDATE schedule_defs SET deleted_name = name, name = NULL
WHERE name IS NOT NULL
  AND id IN (SELECT id FROM schedule_cursors WHERE deleted_at IS NOT NULL);

DROP VIEW schedules;
CREATE VIEW schedules AS
SELECT d.id, coalesce(d.name, d.deleted_name) AS name, d.cron, d.every_ms, d.anchor, d.tz,
       d.template, d.owner_uid, d.misfire, d.catch_up_limit, d.overlap, d.jitter_ms, c.paused,
       c.deleted_at, d.created_at, c.next_run_at, c.waiting, c.last_job_id, d.misfire_skips,
       d.overlap_skips, d.pause_skips, d.last_skip_at, d.last_skip_reason, d.last_skip_nominal
FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id;

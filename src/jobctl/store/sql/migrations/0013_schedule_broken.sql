-- 0013: a schedule that cannot be materialized is marked broken, with a reason, and skipped.
-- One poisoned schedule (a template the store refuses, a zone removed from tzdata) used to
-- fail the materializer's whole batch every second, so no schedule fired at all. Broken is
-- state, like paused, so it lives on the cursor: the due and waiting indexes leave broken
-- schedules out, and the materializer is not woken for them. `resume` clears it (a retry).

ALTER TABLE schedule_cursors ADD COLUMN broken_at INTEGER;   -- NULL: not broken
ALTER TABLE schedule_cursors ADD COLUMN broken_reason TEXT;

DROP INDEX schedule_cursors_due;
DROP INDEX schedule_cursors_waiting;
CREATE INDEX schedule_cursors_due ON schedule_cursors (next_run_at)
    WHERE paused = 0 AND deleted_at IS NULL AND broken_at IS NULL;
CREATE INDEX schedule_cursors_waiting ON schedule_cursors (last_job_id)
    WHERE waiting IS NOT NULL AND paused = 0 AND deleted_at IS NULL AND broken_at IS NULL;

DROP VIEW schedules;
CREATE VIEW schedules AS
-- A deleted schedule shows the name it gave up (0011).
SELECT d.id, coalesce(d.name, d.deleted_name) AS name, d.cron, d.every_ms, d.anchor, d.tz,
       d.template, d.owner_uid, d.misfire, d.catch_up_limit, d.overlap, d.jitter_ms, c.paused, c.deleted_at, d.created_at,
       c.next_run_at, c.waiting, c.last_job_id, d.misfire_skips, d.overlap_skips,
       d.pause_skips, d.last_skip_at, d.last_skip_reason, d.last_skip_nominal,
       c.broken_at, c.broken_reason
FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id;

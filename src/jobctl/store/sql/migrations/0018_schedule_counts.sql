-- 0018: schedule totals kept per owner, in the same transaction as every change (issue 18).
-- `status` summed the cursors and the definitions' skip counters of every schedule (a scan
-- of both tables: 0.35-0.65 s in the daemon with a million schedules), and the quota check
-- of every schedule creation counted the owner's live schedules through an index join.
-- schedule_counts holds, per owner, what those reads computed: live schedules, the paused
-- ones, the broken ones (live, not paused, broken, as status has always counted them) and
-- the skip counters summed over live schedules. Triggers keep it, like job_counts: they
-- fire only when a cursor's paused/deleted/broken state or a definition's skip counters
-- change (never on the materializer's cursor advance, its hot path). A later migration
-- that rebuilds schedule_defs or schedule_cursors (DROP TABLE drops their triggers) must
-- create these again. tests/contract/test_schedule_counts_contract.py holds the counters
-- equal to a recount after random operations.

CREATE TABLE schedule_counts (
    owner_uid     INTEGER PRIMARY KEY,
    live          INTEGER NOT NULL DEFAULT 0,
    paused        INTEGER NOT NULL DEFAULT 0,
    broken        INTEGER NOT NULL DEFAULT 0,
    misfire_skips INTEGER NOT NULL DEFAULT 0,
    overlap_skips INTEGER NOT NULL DEFAULT 0,
    pause_skips   INTEGER NOT NULL DEFAULT 0
);

INSERT INTO schedule_counts (owner_uid, live, paused, broken, misfire_skips, overlap_skips,
                             pause_skips)
SELECT d.owner_uid, count(*), sum(c.paused), sum(c.paused = 0 AND c.broken_at IS NOT NULL),
       sum(d.misfire_skips), sum(d.overlap_skips), sum(d.pause_skips)
FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id
WHERE c.deleted_at IS NULL
GROUP BY d.owner_uid;

CREATE TRIGGER schedule_counts_insert AFTER INSERT ON schedule_cursors
WHEN NEW.deleted_at IS NULL
BEGIN
    INSERT INTO schedule_counts (owner_uid, live, paused, broken, misfire_skips,
                                 overlap_skips, pause_skips)
    SELECT d.owner_uid, 1, NEW.paused, NEW.paused = 0 AND NEW.broken_at IS NOT NULL,
           d.misfire_skips, d.overlap_skips, d.pause_skips
    FROM schedule_defs d WHERE d.id = NEW.id
    ON CONFLICT (owner_uid) DO UPDATE SET
        live = live + 1, paused = paused + excluded.paused, broken = broken + excluded.broken,
        misfire_skips = misfire_skips + excluded.misfire_skips,
        overlap_skips = overlap_skips + excluded.overlap_skips,
        pause_skips = pause_skips + excluded.pause_skips;
END;

CREATE TRIGGER schedule_counts_state AFTER UPDATE OF paused, deleted_at, broken_at
ON schedule_cursors
WHEN OLD.paused IS NOT NEW.paused
  OR (OLD.deleted_at IS NULL) IS NOT (NEW.deleted_at IS NULL)
  OR (OLD.broken_at IS NULL) IS NOT (NEW.broken_at IS NULL)
BEGIN
    UPDATE schedule_counts
    SET live = live + (NEW.deleted_at IS NULL) - (OLD.deleted_at IS NULL),
        paused = paused + (NEW.deleted_at IS NULL AND NEW.paused = 1)
                        - (OLD.deleted_at IS NULL AND OLD.paused = 1),
        broken = broken
            + (NEW.deleted_at IS NULL AND NEW.paused = 0 AND NEW.broken_at IS NOT NULL)
            - (OLD.deleted_at IS NULL AND OLD.paused = 0 AND OLD.broken_at IS NOT NULL),
        misfire_skips = misfire_skips + ((NEW.deleted_at IS NULL) - (OLD.deleted_at IS NULL))
            * (SELECT misfire_skips FROM schedule_defs WHERE id = NEW.id),
        overlap_skips = overlap_skips + ((NEW.deleted_at IS NULL) - (OLD.deleted_at IS NULL))
            * (SELECT overlap_skips FROM schedule_defs WHERE id = NEW.id),
        pause_skips = pause_skips + ((NEW.deleted_at IS NULL) - (OLD.deleted_at IS NULL))
            * (SELECT pause_skips FROM schedule_defs WHERE id = NEW.id)
    WHERE owner_uid = (SELECT owner_uid FROM schedule_defs WHERE id = NEW.id);
END;

CREATE TRIGGER schedule_counts_delete AFTER DELETE ON schedule_cursors
WHEN OLD.deleted_at IS NULL
BEGIN
    UPDATE schedule_counts
    SET live = live - 1, paused = paused - OLD.paused,
        broken = broken - (OLD.paused = 0 AND OLD.broken_at IS NOT NULL),
        misfire_skips = misfire_skips - (SELECT misfire_skips FROM schedule_defs WHERE id = OLD.id),
        overlap_skips = overlap_skips - (SELECT overlap_skips FROM schedule_defs WHERE id = OLD.id),
        pause_skips = pause_skips - (SELECT pause_skips FROM schedule_defs WHERE id = OLD.id)
    WHERE owner_uid = (SELECT owner_uid FROM schedule_defs WHERE id = OLD.id);
END;

CREATE TRIGGER schedule_counts_skips AFTER UPDATE OF misfire_skips, overlap_skips, pause_skips
ON schedule_defs
WHEN NEW.misfire_skips IS NOT OLD.misfire_skips OR NEW.overlap_skips IS NOT OLD.overlap_skips
  OR NEW.pause_skips IS NOT OLD.pause_skips
BEGIN
    UPDATE schedule_counts
    SET misfire_skips = misfire_skips + NEW.misfire_skips - OLD.misfire_skips,
        overlap_skips = overlap_skips + NEW.overlap_skips - OLD.overlap_skips,
        pause_skips = pause_skips + NEW.pause_skips - OLD.pause_skips
    WHERE owner_uid = NEW.owner_uid
      AND EXISTS (SELECT 1 FROM schedule_cursors WHERE id = NEW.id AND deleted_at IS NULL);
END;

-- Pages of one owner's schedules walk this index in listing order (created_at, id) instead
-- of filtering every schedule of the listing index; it replaces the owner-only index.
DROP INDEX schedule_defs_owner;
CREATE INDEX schedule_defs_owner ON schedule_defs (owner_uid, created_at, id);

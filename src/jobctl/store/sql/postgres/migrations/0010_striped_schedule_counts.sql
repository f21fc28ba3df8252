-- schedule_counts striped per server process, as 0009 did for job_counts and log_usage.
--
-- Its row triggers added to the owner's one row. A group commit runs several writes in
-- one transaction, so two daemons changing schedules of two owners in opposite orders
-- (pause, resume, delete, a materializer marking schedules broken, skip counters) each
-- held one owner's row and waited for the other's: `deadlock detected` after
-- deadlock_timeout (1 s), one write rolled back and run again
-- (tests/contract/test_pg_lock_order.py runs the interleaving). Now each server process
-- adds to rows of its own stripe (pg_backend_pid()), readers sum the stripes, and
-- jobctl.store.pg.counts.fold moves them into stripe 0 (SKIP LOCKED), as for job_counts.
ALTER TABLE schedule_counts ADD COLUMN stripe INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedule_counts DROP CONSTRAINT schedule_counts_pkey;
ALTER TABLE schedule_counts ADD PRIMARY KEY (owner_uid, stripe);

CREATE OR REPLACE FUNCTION schedule_counts_row(c schedule_cursors, sign INTEGER) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF c.deleted_at IS NOT NULL THEN
        RETURN;
    END IF;
    INSERT INTO schedule_counts AS s (owner_uid, stripe, live, paused, broken, misfire_skips,
                                      overlap_skips, pause_skips)
    SELECT d.owner_uid, pg_backend_pid(), sign, sign * c.paused,
           sign * (CASE WHEN c.paused = 0 AND c.broken_at IS NOT NULL THEN 1 ELSE 0 END),
           sign * d.misfire_skips, sign * d.overlap_skips, sign * d.pause_skips
    FROM schedule_defs d WHERE d.id = c.id
    ON CONFLICT (owner_uid, stripe) DO UPDATE SET
        live = s.live + excluded.live, paused = s.paused + excluded.paused,
        broken = s.broken + excluded.broken,
        misfire_skips = s.misfire_skips + excluded.misfire_skips,
        overlap_skips = s.overlap_skips + excluded.overlap_skips,
        pause_skips = s.pause_skips + excluded.pause_skips;
END $$;

-- The skip counters' deltas go to the process's stripe too (an upsert: the stripe may
-- have no row of that owner yet).
CREATE OR REPLACE FUNCTION schedule_counts_skips() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO schedule_counts AS s (owner_uid, stripe, misfire_skips, overlap_skips,
                                      pause_skips)
    SELECT NEW.owner_uid, pg_backend_pid(), NEW.misfire_skips - OLD.misfire_skips,
           NEW.overlap_skips - OLD.overlap_skips, NEW.pause_skips - OLD.pause_skips
    WHERE EXISTS (SELECT 1 FROM schedule_cursors WHERE id = NEW.id AND deleted_at IS NULL)
    ON CONFLICT (owner_uid, stripe) DO UPDATE SET
        misfire_skips = s.misfire_skips + excluded.misfire_skips,
        overlap_skips = s.overlap_skips + excluded.overlap_skips,
        pause_skips = s.pause_skips + excluded.pause_skips;
    RETURN NULL;
END $$;

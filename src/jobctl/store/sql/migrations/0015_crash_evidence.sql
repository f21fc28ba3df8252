-- 0015: evidence about a daemon crash, kept on each attempt start-up recovery ended
-- (issue 13, item 4). crash_suspect is 1 when the attempt's command had already gone
-- when the next daemon started (it may have taken the daemon down), 0 when the command
-- was still running (it outlived the crash, so the crash was not its doing), NULL for
-- every attempt recovery did not end. The poison rule (jobctl.domain.retry.crash_poison)
-- reads the suspects of one crash through the partial index: a few rows per crash.
ALTER TABLE attempts ADD COLUMN crash_suspect INTEGER CHECK (crash_suspect IN (0, 1));
CREATE INDEX attempts_crash_suspects ON attempts (lease_owner) WHERE crash_suspect = 1;

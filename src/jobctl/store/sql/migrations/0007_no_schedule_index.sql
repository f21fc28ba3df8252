-- 0007: no index on jobs (schedule_id). Every occurrence job paid for an entry on a
-- random page of it (schedule ids are random), about a tenth of the materializer's time,
-- and only `schedules show` read it. Its recent jobs are now found through the unique key
-- index: an occurrence's key is '<schedule-id>@...', so they are one key range.
DROP INDEX jobs_schedule;
